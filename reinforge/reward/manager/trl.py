"""The `trl` reward manager: reward functions written for TRL's GRPOTrainer, called as it calls them.

A TRL reward function scores the whole batch in one call and returns one reward per response:

    reward_func(prompts=[...], completions=[...], completion_ids=[...], trainer_state=..., log_extra=..., log_metric=...,
                **columns) -> list[float | None]

- `prompts`: each row's prompt as its data file holds it (a string, or a list of chat messages; OpenRLHF's
  data.apply_chat_template and data.input_template applied); `completions`: the
  decoded response, a string for a string prompt and `[{"role": "assistant", "content": text}]` for a chat prompt
  (TRL's standard and conversational formats); `completion_ids`: the response's token ids.
- `**columns`: every other column of the row's data file, one list per column (None where a row lacks it), so a
  `solution` column reaches `accuracy_reward(completions, solution, **kwargs)`. Rows of a Dataset class
  (`data.custom_cls`) give its items' `data_source`, `reward_model`, `extra_info` and `ability`.
- `trainer_state`: `global_step` (training steps done before these responses were generated), `max_steps`, `epoch`.
- `log_extra(column, values)`: a column of per-row values, kept as a reward extra key (rollout dumps,
  `reward/<column>/mean` when numeric); `log_metric(name, value)`: a number, kept as the extra key `name` on every row.

A function that does not take `**kwargs` is given only the arguments it names. `reinforge.reward.loading` decides
that a function is TRL's by its parameters (`is_trl_reward`) and wraps the functions `custom_reward_function.name`
lists in one `TRLRewardFunctions`; the trainer then uses this manager in place of `naive`. Each row's score is the
`custom_reward_function.reward_weights`-weighted sum of the functions' rewards, a None (or NaN) left out, as TRL's
`nansum`; each function's reward is also the extra key of its name (`reward/<name>/mean`). A row for which every
function returned None scores 0.0 (TRL leaves such a row out of its group's mean instead), with a warning.

Failures: a function that raises loses its rewards for the batch, the others' count (`reward/function_errors`, its
traceback printed once); when every function raised, every row scores 0.0 (`reward/errors`), as a `batch` manager's
failed call; a result of the wrong length or type is a RewardError naming the function; responses no function scored
count in `reward/unscored`; `reward_model.reward_kwargs.timeout_s` limits the whole call (run in a worker process, so
the functions must be top-level functions of their file or module). Each row's prompt and columns are its own copies.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import math
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.environment.data_files import is_text_prompt
from reinforge.environment.multimodal import pil_images, row_images
from reinforge.errors import ConfigError, DataError, RewardError
from reinforge.reward.manager.base import RewardManager, Sample, real_number, register_reward_manager
from reinforge.reward.manager.calls import COMPLETION_PARAMETERS, VERL_PARAMETERS, WorkerError, function_name, run_coroutine
from reinforge.reward.manager.openrlhf import is_openrlhf_reward
from reinforge.reward.registry import default_compute_score

GIVEN = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")  # what every call passes
COMPLETION_COLUMNS = ("completion", "completion_ids")  # columns TRL does not pass on, as the prompt's (`prompts`)
RESERVED = ("score", "acc", "input", "output", "gts", "step")  # reinforge's own per-row values: no function or log takes them
_CUSTOM_DATASET_FIELDS = ("data_source", "reward_model", "extra_info", "ability")  # a Dataset class's rows' columns


def is_trl_reward(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is written for TRL (a `completions`, `completion_ids` or `prompts` parameter) rather than for verl
    (whose functions take `solution_str`, or `solution_strs` for the batch manager) or OpenRLHF (`queries` and no
    completions: `reinforge.reward.manager.openrlhf.is_openrlhf_reward`)."""
    try:
        parameters = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return bool((COMPLETION_PARAMETERS | {"prompts"}) & parameters) and not VERL_PARAMETERS & parameters \
        and not is_openrlhf_reward(fn)


@dataclass
class TrainerState:
    """What TRL's reward functions read of its `trainer_state` (transformers' TrainerState): the common fields."""

    global_step: int = 0  # training steps done before the responses were generated (each may hold several optimizer steps)
    max_steps: int = 0  # the run's training steps
    epoch: float = 0.0  # epochs of the training data done, fractional as TRL's (global_step / steps per epoch)
    num_train_epochs: int = 0  # epochs the run's steps span, as TRL counts them: ceil(max_steps / steps per epoch)
    is_world_process_zero: bool = True
    is_local_process_zero: bool = True

    @classmethod
    def at(cls, done: int, max_steps: int, steps_per_epoch: int) -> TrainerState:
        per_epoch = max(steps_per_epoch, 1)
        return cls(done, max_steps, done / per_epoch, -(-max_steps // per_epoch))


class FunctionError(WorkerError):
    """A TRL reward function raised; the message holds its traceback (it may have run in a worker process)."""


class TRLRewardFunctions:
    """The TRL reward functions of one run, called in turn on one batch; picklable (a worker process may call it).

    Called with the batch's `prompts`, `completions`, `completion_ids`, `columns` (column -> per-row list) and
    `trainer_state`, it returns `{"rewards": one list per function (None for one that raised), "errors": function
    name -> traceback, "columns": what log_extra logged, "metrics": what log_metric logged (name -> values)}`."""

    def __init__(self, functions: list[Callable[..., Any]], names: list[str], weights: list[float]) -> None:
        self.functions, self.names, self.weights = functions, names, weights
        # each function's parameters, read once: (name, kind, has a default); a call gives a function without **kwargs
        # only the arguments it names
        self.parameters = [[(p.name, p.kind, p.default is not p.empty) for p in inspect.signature(fn).parameters.values()]
                           for fn in functions]
        self.required = self.required_columns()

    def describe(self) -> str:
        """How messages name the functions: each with its file."""
        return ", ".join(function_name(fn) for fn in self.functions)

    def check(self) -> None:
        """RewardError for what no call could fix: a name listed twice or one of reinforge's own (RESERVED), and
        positional-only parameters (every argument is given by keyword, as TRL gives them)."""
        for name, fn, parameters in zip(self.names, self.functions, self.parameters, strict=True):
            if self.names.count(name) > 1 or name in RESERVED:
                why = "is listed twice" if self.names.count(name) > 1 else \
                    f"is the name of a value reinforge records itself ({', '.join(RESERVED)})"
                raise RewardError(f"custom_reward_function.name={self.names}: {name} {why}; each function's reward is "
                                  "recorded under its name. Name each function once, under another name (an alias in your file)")
            positional = [p for p, kind, _ in parameters if kind is inspect.Parameter.POSITIONAL_ONLY]
            if positional:
                raise RewardError(f"the TRL reward function {function_name(fn)} has positional-only parameters "
                                  f"({', '.join(positional)}, before '/'); TRL reward functions are given every argument "
                                  "by keyword (prompts=, completions=, ...): remove the '/'")

    def takes(self, column: str) -> bool:
        """Whether any function is given `column` (it names it, or takes **kwargs)."""
        return any(name == column or kind is inspect.Parameter.VAR_KEYWORD
                   for parameters in self.parameters for name, kind, _ in parameters)

    def required_columns(self) -> dict[str, list[str]]:
        """For each function name, the data columns it needs: parameters without a default that a call does not give."""
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return {name: [p for p, kind, default in parameters if not default and p not in GIVEN and kind in named]
                for name, parameters in zip(self.names, self.parameters, strict=True)}

    def __call__(self, prompts: list, completions: list, completion_ids: list, columns: dict[str, list],
                 trainer_state: TrainerState) -> dict[str, Any]:
        out: dict[str, Any] = {"rewards": [None] * len(self.functions), "errors": {}, "columns": {}, "metrics": {}}
        rows = len(completions)
        pending = []
        for i, (fn, name) in enumerate(zip(self.functions, self.names, strict=True)):
            missing = [column for column in self.required[name] if column not in columns]
            if missing:  # rows of a Dataset class (the built-in dataset's are checked before training)
                raise RewardError(f"the TRL reward function {function_name(fn)} takes {missing[0]!r}, which the batch's rows "
                                  f"do not have; their columns are {', '.join(columns)}")
            arguments = {"prompts": prompts, "completions": completions, "completion_ids": completion_ids, **columns,
                         "trainer_state": trainer_state, **_loggers(out, function_name(fn), rows)}
            try:
                result = fn(**_accepted(self.parameters[i], arguments))
            except (Exception, SystemExit):  # user code: this function's rewards are lost, the others' count
                out["errors"][name] = traceback.format_exc()
                continue
            if inspect.isawaitable(result):  # async functions run together, as TRL's do
                pending.append((i, name, result))
            else:
                out["rewards"][i] = result
        if pending:
            async def settle(awaitable: Any) -> Any:
                try:
                    return await awaitable
                except (Exception, SystemExit):
                    return FunctionError(traceback.format_exc())

            async def gather() -> list[Any]:
                return await asyncio.gather(*(settle(awaitable) for *_, awaitable in pending))

            for (i, name, _), result in zip(pending, run_coroutine(gather()), strict=True):
                if isinstance(result, FunctionError):
                    out["errors"][name] = str(result)
                else:
                    out["rewards"][i] = result
        return out


def _loggers(out: dict[str, Any], who: str, rows: int) -> dict[str, Callable[..., None]]:
    """`log_extra` and `log_metric` for one function (`who`, for messages), recording into `out`."""

    def log_extra(column: str, values: Any) -> None:
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise RewardError(f"{who} called log_extra({column!r}, ...) with {type(values).__name__}; it takes a list of "
                              f"one value per completion ({rows})")
        if len(values) != rows:
            raise RewardError(f"{who} called log_extra({column!r}, ...) with {len(values)} values; the batch has {rows} "
                              "completions")
        out["columns"][column] = (list(values), who)

    def log_metric(name: str, value: Any) -> None:
        try:
            number = real_number(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise RewardError(f"{who} called log_metric({name!r}, {value!r}); it takes a finite number")
        out["metrics"].setdefault(name, ([], who))[0].append(number)

    return {"log_extra": log_extra, "log_metric": log_metric}


def _accepted(parameters: list[tuple], arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments`, or, for a function without `**kwargs` (its `parameters`), those it names."""
    if any(kind is inspect.Parameter.VAR_KEYWORD for _, kind, _ in parameters):
        return arguments
    names = {name for name, _, _ in parameters}
    return {key: value for key, value in arguments.items() if key in names}


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
                 reward_fn_key: str = "data_source", timeout_s: float | None = None, prompt_key: str = "prompt",
                 image_key: str | None = None) -> None:
        if not isinstance(compute_score, TRLRewardFunctions):
            what = ("none is named (the built-in scorers are verl's)" if getattr(compute_score, "func", compute_score)
                    in (None, default_compute_score) else f"{function_name(compute_score)} is not one")
            raise ConfigError(
                "reward_model.reward_manager=trl calls reward functions written for TRL, fn(prompts, completions, "
                f"completion_ids, **columns) -> list of rewards; {what}. Set custom_reward_function.path and "
                ".name to such functions, or use reward_model.reward_manager=naive")
        self.prompt_key, self.image_key = prompt_key, image_key
        self._reported_functions: set[str] = set()  # functions whose failure was printed
        self._call_error: BaseException | None = None
        self._call_counts: dict[str, int] = {}  # this call's reward/function_errors and reward/unscored
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s)

    def _check_signature(self, fn: Callable[..., Any]) -> None:  # each function was checked when it was loaded
        return

    def _samples(self, batch: Batch) -> list[Sample]:
        samples = super()._samples(batch)
        state = batch.meta_info.get("trainer_state") or TrainerState()
        rows = batch["row_columns"] if "row_columns" in batch else None
        raw = batch["raw_prompt"] if "raw_prompt" in batch else None
        out = []
        decoded: dict[int, Any] = {}  # a row's images as PIL images, decoded once for its rollout.n samples
        pil = self.image_key is not None and self.compute_score.takes(self.image_key)
        for sample in samples:
            i = sample.row
            if rows is not None and rows[i] is not None:
                columns = {key: value for key, value in rows[i].items() if key not in (self.prompt_key, *COMPLETION_COLUMNS)}
                prompt = rows[i].get(self.prompt_key)
                if pil and row_images(columns, self.image_key):  # as TRL's datasets give them: PIL images
                    value = columns[self.image_key]
                    if id(value) not in decoded:
                        index = (batch["extra_info"][i] or {}).get("index") if "extra_info" in batch else i
                        decoded[id(value)] = pil_images(value, f"the row (extra_info.index={index}), column {self.image_key!r}")
                    columns[self.image_key] = decoded[id(value)]
            else:  # a Dataset class's item: the fields verl's schema names, and the chat messages
                columns = {key: batch[key][i] for key in _CUSTOM_DATASET_FIELDS if key in batch}
                prompt = raw[i] if raw is not None else self._decode_prompt(batch, i)
            ids = batch["responses"][i, : sample.response_length].tolist()
            # each row its own copy, as TRL's rows are: a function that changes one changes neither the data nor a sibling
            out.append(TRLSample(**vars(sample), prompt=copy.deepcopy(prompt), completion_ids=ids,
                                 columns=copy.deepcopy(columns), trainer_state=state))
        return out

    def _compute(self, samples: list[Sample]) -> list[Any]:
        keys = list(dict.fromkeys(key for s in samples for key in s.columns))
        call = {
            "prompts": [s.prompt for s in samples],
            "completions": [s.solution_str if is_text_prompt(s.prompt) else [{"role": "assistant", "content": s.solution_str}]
                            for s in samples],
            "completion_ids": [s.completion_ids for s in samples],
            "columns": {key: [s.columns.get(key) for s in samples] for key in keys},
            "trainer_state": samples[0].trainer_state if samples else TrainerState(),
        }
        self._call_counts = {}
        [result] = self._call([call], max_concurrency=1)
        if not isinstance(result, BaseException) and len(result["errors"]) == len(self.compute_score.functions):
            self._call_counts = {"reward/function_errors": len(result["errors"]), "reward/unscored": len(samples)}
            result = FunctionError("".join(result["errors"].values()))  # every function raised: every row fails
        self._call_error = result if isinstance(result, BaseException) else None
        if self._call_error is not None:
            return [result] * len(samples)
        return self._rows(result, samples)

    def _parse(self, samples: list[Sample], results: list[Any]) -> tuple:
        scores, extras, plain, metrics = super()._parse(samples, results)
        return scores, extras, plain, {**metrics, **self._call_counts}

    def _rows(self, result: dict[str, Any], samples: list[Sample]) -> list[dict[str, Any]]:
        """Each row's result as a dict: `score` (the weighted sum), each function's reward and what was logged."""
        functions: TRLRewardFunctions = self.compute_score
        rows = len(samples)
        for name, text in result["errors"].items():  # the others' rewards count; this one's are None for the call
            self._report_function(name, text)
        per_function = [[None] * rows if name in result["errors"] else _rewards(fn, out, rows)
                        for fn, name, out in zip(functions.functions, functions.names, result["rewards"], strict=True)]
        extra: dict[str, list] = dict(zip(functions.names, per_function, strict=True))
        for column, (values, who) in result["columns"].items():
            extra[_free(column, extra, f"{who} logged it with log_extra")] = values
        for name, (values, who) in result["metrics"].items():
            extra[_free(name, extra, f"{who} logged it with log_metric")] = [float(np.mean(values))] * rows
        out = []
        for row in range(rows):
            scored = [(w, r[row]) for w, r in zip(functions.weights, per_function, strict=True) if r[row] is not None]
            out.append({"score": sum(w * r for w, r in scored), **{key: values[row] for key, values in extra.items()}})
        unscored = sum(all(r[row] is None for r in per_function) for row in range(rows))
        self._call_counts = {"reward/function_errors": len(result["errors"]), "reward/unscored": unscored}
        if unscored and "unscored" not in self._reported:
            self._reported.add("unscored")
            print(f"reinforge: warning: no TRL reward function scored {unscored} of {rows} responses (each returned None or "
                  "NaN for them, or raised); such a response scores 0.0 (TRL leaves it out of its group's mean). Counted "
                  "in reward/unscored; later ones are not reported.", file=sys.stderr)
        return out

    def _report_function(self, name: str, text: str) -> None:
        """Print the first failure of each function (with its traceback); the others of the call still score."""
        if name not in self._reported_functions:
            self._reported_functions.add(name)
            print(f"reinforge: the TRL reward function {name} failed; its rewards are left out of this batch (the other "
                  "functions' count; a batch every function failed on scores 0). Later failures are only counted in "
                  f"reward/function_errors.\n{text}", file=sys.stderr)

    def _where(self, sample: Sample, error: BaseException) -> str:
        if error is self._call_error:
            return "in its call for the whole batch; every row scores 0.0"
        return super()._where(sample, error)


def _rewards(fn: Callable[..., Any], result: Any, rows: int) -> list[float | None]:
    """A function's rewards checked: one number or None per row; None for NaN (TRL's "not scored"), RewardError else."""
    if isinstance(result, (np.ndarray, torch.Tensor)) and result.ndim == 1:
        result = result.tolist()
    if not isinstance(result, (list, tuple)):
        shape = f" of shape {tuple(result.shape)}" if isinstance(result, (np.ndarray, torch.Tensor)) else ""
        raise RewardError(f"the TRL reward function {function_name(fn)} returned {type(result).__name__}{shape}; it must "
                          "return a list with one reward (a number, or None) per completion")
    if len(result) != rows:
        raise RewardError(f"the TRL reward function {function_name(fn)} returned {len(result)} rewards for {rows} "
                          "completions; it must return one per completion, in order")
    values: list[float | None] = []
    for row, value in enumerate(result):
        try:
            number = None if value is None else real_number(value)
        except ValueError as error:
            number, what = math.inf, str(error)
        else:
            what = repr(value)
        if number is not None and math.isinf(number):
            raise RewardError(f"the TRL reward function {function_name(fn)} returned {what} for completion {row}; a reward is "
                              "a finite number, or None for not scored")
        values.append(None if number is None or math.isnan(number) else number)
    return values


def _free(key: str, taken: dict[str, list], how: str) -> str:
    """`key` when no reward function and nothing logged before has it and it is not one of reinforge's own (RESERVED)."""
    if key in RESERVED or key in taken:
        raise RewardError(f"{key!r}: {how}, but it is already the name of a reward function, of another logged value or of "
                          f"one reinforge records itself ({', '.join(RESERVED)}); log it under another name")
    return key


def check_rows(functions: TRLRewardFunctions, located_rows: Any, prompt_key: str) -> None:
    """DataError naming the file and row of the first row with a column named as an argument every call gives
    (`prompts`, `completions`, ...: TRL refuses such data too), without a column a function takes (one of its
    parameters without a default), or whose prompt is a string where an earlier one is chat messages or the reverse
    (a call's completions would mix TRL's two formats), found before training rather than at the first step."""
    needed = {name: columns for name, columns in functions.required.items() if columns}
    dropped = (prompt_key, *COMPLETION_COLUMNS)
    for name, parameters in zip(functions.names, functions.parameters, strict=True):
        named = [p for p, _, _ in parameters if p in dropped and p not in GIVEN]  # with a default too: it would stay None
        if named:
            raise DataError(f"custom_reward_function.name: the TRL reward function {name} takes {named[0]!r}, a column "
                            "that does not reach reward functions (the prompt column, data.prompt_key, reaches them as "
                            "prompts; TRL's completion columns not at all); take prompts instead")
    first: tuple[bool, str, int] | None = None  # the first row's prompt is a string; its file and number
    for row, file, number in located_rows:
        clash = [column for column in row if column in GIVEN and column not in dropped]
        if clash:
            raise DataError(f"{file}: row {number}: the column {clash[0]!r} has the name of an argument every TRL reward "
                            f"function is given ({', '.join(GIVEN)}); rename the column")
        text = is_text_prompt(row.get(prompt_key))
        first = first or (text, file, number)
        if text != first[0]:
            kinds = ("a string", "chat messages") if text else ("chat messages", "a string")
            raise DataError(f"{file}: row {number}, column {prompt_key!r}: the prompt is {kinds[0]}, but in {first[1]} row "
                            f"{first[2]} it is {kinds[1]}; TRL reward functions take one format per run (completions as "
                            "strings, or as chat messages), so give every prompt the same form")
        for name, columns in needed.items():
            missing = [column for column in columns if column not in row]
            if missing:
                raise DataError(
                    f"{file}: row {number}: no column {missing[0]!r}, which the TRL reward function {name} takes "
                    f"(custom_reward_function.name); a TRL reward function is given each data column by name. The row's "
                    f"columns: {', '.join(row)}")
