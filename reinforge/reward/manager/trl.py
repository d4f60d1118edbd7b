"""The `trl` reward manager: reward functions written for TRL's GRPOTrainer, called as it calls them.

A TRL reward function scores the whole batch in one call and returns one reward per response:

    reward_func(prompts=[...], completions=[...], completion_ids=[...], trainer_state=..., log_extra=..., log_metric=...,
                **columns) -> list[float | None]

- `prompts`: each row's prompt as its data file holds it (a string, or a list of chat messages); `completions`: the
  decoded response, a string for a string prompt and `[{"role": "assistant", "content": text}]` for a chat prompt
  (TRL's standard and conversational formats); `completion_ids`: the response's token ids.
- `**columns`: every other column of the row's data file, one list per column (None where a row lacks it), so a
  `solution` column reaches `accuracy_reward(completions, solution, **kwargs)`. Rows of a Dataset class
  (`data.custom_cls`) give its items' `data_source`, `reward_model`, `extra_info` and `ability`.
- `trainer_state`: `global_step` (optimizer steps done before these responses were generated), `max_steps`, `epoch`.
- `log_extra(column, values)`: a column of per-row values, kept as a reward extra key (rollout dumps,
  `reward/<column>/mean` when numeric); `log_metric(name, value)`: a number, kept as the extra key `name` on every row.

A function that does not take `**kwargs` is given only the arguments it names. `reinforge.reward.loading` decides
that a function is TRL's by its parameters (`is_trl_reward`) and wraps the functions `custom_reward_function.name`
lists in one `TRLRewardFunctions`; the trainer then uses this manager in place of `naive`. Each row's score is the
`custom_reward_function.reward_weights`-weighted sum of the functions' rewards, a None (or NaN) left out, as TRL's
`nansum`; each function's reward is also the extra key of its name (`reward/<name>/mean`). A row for which every
function returned None scores 0.0 (TRL leaves such a row out of its group's mean instead), with a warning.

Failures as the `batch` manager's: a call that raises scores every row 0.0 (`reward/errors`, traceback printed once);
a result of the wrong length or type is a RewardError naming the function; `reward_model.reward_kwargs.timeout_s`
limits the whole call (run in a worker process, so the functions must be top-level functions of their file).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.errors import ConfigError, DataError, RewardError
from reinforge.reward.manager.base import RewardManager, Sample, register_reward_manager
from reinforge.reward.manager.calls import function_name, run_coroutine

GIVEN = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")  # what every call passes
_CUSTOM_DATASET_FIELDS = ("data_source", "reward_model", "extra_info", "ability")  # a Dataset class's rows' columns


def is_trl_reward(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is written for TRL (a `completions` or `completion_ids` parameter) rather than for verl (whose
    functions take `solution_str`, or `solution_strs` for the batch manager)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return bool({"completions", "completion_ids"} & set(parameters)) and not {"solution_str", "solution_strs"} & set(parameters)


@dataclass
class TrainerState:
    """What TRL's reward functions read of its `trainer_state`."""

    global_step: int = 0  # optimizer steps done before the responses were generated
    max_steps: int = 0  # the run's training steps
    epoch: float = 0.0  # epochs of the training data served so far


class TRLRewardFunctions:
    """The TRL reward functions of one run, called in turn on one batch; picklable (a worker process may call it).

    Called with the batch's `prompts`, `completions`, `completion_ids`, `columns` (column -> per-row list) and
    `trainer_state`, it returns `{"rewards": one list per function, "columns": what log_extra logged,
    "metrics": what log_metric logged (name -> values)}`."""

    def __init__(self, functions: list[Callable[..., Any]], names: list[str], weights: list[float]) -> None:
        self.functions, self.names, self.weights = functions, names, weights

    def required_columns(self) -> dict[str, list[str]]:
        """For each function name, the data columns it needs: parameters without a default that a call does not give."""
        needed = {}
        for fn, name in zip(self.functions, self.names, strict=True):
            parameters = inspect.signature(fn).parameters.values()
            needed[name] = [p.name for p in parameters if p.default is p.empty and p.name not in GIVEN
                            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        return needed

    def __call__(self, prompts: list, completions: list, completion_ids: list, columns: dict[str, list],
                 trainer_state: TrainerState) -> dict[str, Any]:
        logged_columns: dict[str, list] = {}
        logged_metrics: dict[str, list[float]] = {}

        def log_extra(column: str, values: list) -> None:
            logged_columns[column] = list(values)

        def log_metric(name: str, value: float) -> None:
            logged_metrics.setdefault(name, []).append(value)

        arguments = {"prompts": prompts, "completions": completions, "completion_ids": completion_ids, **columns,
                     "trainer_state": trainer_state, "log_extra": log_extra, "log_metric": log_metric}
        rewards: list[Any] = [None] * len(self.functions)
        pending = []
        for i, (fn, name) in enumerate(zip(self.functions, self.names, strict=True)):
            missing = [column for column in self.required_columns()[name] if column not in arguments]
            if missing:  # rows of a Dataset class (the built-in dataset's are checked before training)
                raise RewardError(f"the TRL reward function {name} takes {missing[0]!r}, which the batch's rows do not have; "
                                  f"their columns are {', '.join(columns)}")
            result = fn(**_accepted(fn, arguments))
            if inspect.isawaitable(result):  # async functions run together, as TRL's do
                pending.append((i, result))
            else:
                rewards[i] = result
        if pending:
            async def gather() -> list[Any]:
                return await asyncio.gather(*(awaitable for _, awaitable in pending))

            for (i, _), result in zip(pending, run_coroutine(gather()), strict=True):
                rewards[i] = result
        return {"rewards": rewards, "columns": logged_columns, "metrics": logged_metrics}


def _accepted(fn: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments`, or, for a function without `**kwargs`, those it names."""
    parameters = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return arguments
    return {key: value for key, value in arguments.items() if key in parameters}


@dataclass
class TRLSample(Sample):
    """A row with what TRL's call gives besides the response text."""

    prompt: Any = None
    completion_ids: list[int] | None = None
    columns: dict[str, Any] | None = None
    trainer_state: TrainerState | None = None


@register_reward_manager("trl")
class TRLRewardManager(RewardManager):
    """Scores a batch with TRL reward functions (`TRLRewardFunctions`); see the module docstring."""

    needs_ground_truth = False  # TRL's data has its answers in columns of its own

    def __init__(self, tokenizer: Any, num_examine: int = 0, compute_score: Callable[..., Any] | None = None,
                 reward_fn_key: str = "data_source", timeout_s: float | None = None, prompt_key: str = "prompt") -> None:
        if not isinstance(compute_score, TRLRewardFunctions):
            what = function_name(compute_score) if compute_score is not None else "the built-in scorer"
            raise ConfigError(
                "reward_model.reward_manager=trl calls reward functions written for TRL, fn(prompts, completions, "
                f"completion_ids, **columns) -> list of rewards; {what} is not one. Set custom_reward_function.path and "
                ".name to such a function, or use reward_model.reward_manager=naive")
        self.prompt_key = prompt_key
        self._warned_unscorable = False
        self._call_error: BaseException | None = None
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s)

    def _check_signature(self, fn: Callable[..., Any]) -> None:  # each function was checked when it was loaded
        return

    def _samples(self, batch: Batch) -> list[Sample]:
        samples = super()._samples(batch)
        state = TrainerState(**batch.meta_info.get("trainer_state", {}))
        rows = batch["row_columns"] if "row_columns" in batch else None
        raw = batch["raw_prompt"] if "raw_prompt" in batch else None
        out = []
        for sample in samples:
            i = sample.row
            if rows is not None and rows[i] is not None:
                columns = {key: value for key, value in rows[i].items() if key != self.prompt_key}
                prompt = rows[i].get(self.prompt_key)
            else:  # a Dataset class's item: the fields verl's schema names, and the chat messages
                columns = {key: batch[key][i] for key in _CUSTOM_DATASET_FIELDS if key in batch}
                prompt = raw[i] if raw is not None else self._decode_prompt(batch, i)
            ids = batch["responses"][i, : sample.response_length].tolist()
            out.append(TRLSample(**vars(sample), prompt=prompt, completion_ids=ids, columns=columns, trainer_state=state))
        return out

    def _compute(self, samples: list[Sample]) -> list[Any]:
        keys = list(dict.fromkeys(key for s in samples for key in s.columns))
        call = {
            "prompts": [s.prompt for s in samples],
            "completions": [s.solution_str if isinstance(s.prompt, str) else [{"role": "assistant", "content": s.solution_str}]
                            for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "columns": {key: [s.columns.get(key) for s in samples] for key in keys},
            "trainer_state": samples[0].trainer_state if samples else TrainerState(),
        }
        [result] = self._call([call], max_concurrency=1)
        self._call_error = result if isinstance(result, BaseException) else None
        if self._call_error is not None:
            return [result] * len(samples)
        return self._rows(result, samples)

    def _rows(self, result: dict[str, Any], samples: list[Sample]) -> list[dict[str, Any]]:
        """Each row's result as a dict: `score` (the weighted sum), each function's reward and what was logged."""
        functions: TRLRewardFunctions = self.compute_score
        rows = len(samples)
        per_function = [_rewards(fn, out, rows) for fn, out in zip(functions.functions, result["rewards"], strict=True)]
        extra: dict[str, list] = dict(zip(functions.names, per_function, strict=True))
        for column, values in result["columns"].items():
            if len(values) != rows:
                raise RewardError(f"a TRL reward function logged column {column!r} with log_extra for {len(values)} rows; "
                                  f"the batch has {rows}")
            extra[_free(column, extra, "log_extra")] = values
        for name, values in result["metrics"].items():
            extra[_free(name, extra, "log_metric")] = [float(np.mean(values))] * rows
        out = []
        for row in range(rows):
            scored = [(w, r[row]) for w, r in zip(functions.weights, per_function, strict=True) if r[row] is not None]
            if not scored:
                self._warn_unscorable(samples[row])
            out.append({"score": sum(w * r for w, r in scored), **{key: values[row] for key, values in extra.items()}})
        return out

    def _warn_unscorable(self, sample: Sample) -> None:
        if not self._warned_unscorable:
            self._warned_unscorable = True
            print(f"reinforge: warning: every TRL reward function returned None for row {sample.row} (data_source="
                  f"{sample.data_source!r}); such a row scores 0.0 (TRL leaves it out of its group's mean). Later ones "
                  "are not reported.", file=sys.stderr)

    def _where(self, sample: Sample, error: BaseException) -> str:
        if error is self._call_error:
            return "in its call for the whole batch; every row scores 0.0"
        return super()._where(sample, error)


def _rewards(fn: Callable[..., Any], result: Any, rows: int) -> list[float | None]:
    """A function's rewards checked: one number or None per row; None for NaN (TRL's "not scored"), RewardError else."""
    if isinstance(result, (np.ndarray, torch.Tensor)) and result.ndim == 1:
        result = result.tolist()
    if not isinstance(result, (list, tuple)):
        raise RewardError(f"the TRL reward function {function_name(fn)} returned {type(result).__name__}; it must "
                          "return a list with one reward (a number, or None) per completion")
    if len(result) != rows:
        raise RewardError(f"the TRL reward function {function_name(fn)} returned {len(result)} rewards for {rows} "
                          "completions; it must return one per completion, in order")
    values: list[float | None] = []
    for row, value in enumerate(result):
        if isinstance(value, (np.generic, torch.Tensor)) and np.ndim(value) == 0:
            value = value.item()
        if value is not None and not isinstance(value, numbers.Real):
            raise RewardError(f"the TRL reward function {function_name(fn)} returned {type(value).__name__} "
                              f"{value!r} for completion {row}; a reward is a number, or None for not scored")
        if value is not None and math.isinf(float(value)):
            raise RewardError(f"the TRL reward function {function_name(fn)} returned {value} for completion {row}")
        values.append(None if value is None or math.isnan(float(value)) else float(value))
    return values


def _free(key: str, taken: dict[str, list], how: str) -> str:
    """`key` when no reward function and nothing logged before has it (and it is not `score`), else RewardError."""
    if key == "score" or key in taken:
        raise RewardError(f"a TRL reward function logged {key!r} with {how}, which is already the name of a reward "
                          "function or of the score; log it under another name")
    return key


def check_required_columns(functions: TRLRewardFunctions, located_rows: Any, prompt_key: str) -> None:
    """DataError naming the file, row and function of the first row without a column a function needs (one of its
    parameters without a default), found before training rather than at the first step."""
    needed = {name: columns for name, columns in functions.required_columns().items() if columns}
    if not needed:
        return
    for row, file, number in located_rows:
        for name, columns in needed.items():
            missing = [column for column in columns if column not in row or column == prompt_key]
            if missing:
                raise DataError(
                    f"{file}: row {number}: no column {missing[0]!r}, which the TRL reward function {name} takes "
                    f"(custom_reward_function.name); a TRL reward function is given each data column by name. The row's "
                    f"columns: {', '.join(row)}")
