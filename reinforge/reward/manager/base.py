"""What every reward manager shares: the registry by name, reading a Batch, checking scores, the result.

`RewardManager.__call__(batch, return_dict=False)` is the one entry of every manager:

1. `_samples`: decode each row's valid response tokens (`solution_str`) and read its data
   source (`reward_fn_key`), `reward_model.ground_truth` and `extra_info` (with `num_turns` and
   `rollout_reward_scores` added, as verl 0.9 does: docs/agents.md);
2. `_compute` (each manager's own): one entry per row, the reward function's result or the
   exception in its place. Without `timeout_s` nothing stops a call that hangs, so a watchdog
   prints a warning naming the function and `timeout_s` once a call has run 300 s
   (REINFORGE_REWARD_WATCHDOG_S); the call goes on (a slow sandbox may be fine);
3. `_parse`: a number (int, float, bool, numpy/torch scalar) or a dict with a numeric "score" is a
   score; anything else, a non-finite number, or an exception scores 0.0 and is counted in
   `reward/errors`; a `ScoreTimeout` scores 0.0 and is counted in `reward/timeouts`. The first
   error and the first timeout of a manager are printed to stderr with their row, data source and
   traceback; later ones are only counted. A reinforge `UserError` (e.g. the RewardError of an
   unknown data_source) is a setup mistake that would zero every reward, so it stops the call.
4. `_shape`: reward from score (identity, or DAPO's overlong penalty);
5. the reward goes on the last valid response token of a `(batch, response_len)` float32 tensor
   (a zero-length response gets none; a multi-turn one, its last model token); with `return_dict`, also `reward_extra_info` ("score" and
   the other keys of dict results, None where a row lacks a key) and `reward_metrics`
   (`reward/errors`, `reward/timeouts`: counts of rows, always present); `last_failure` and
   `failure_summary()` describe the call's first failed row (the trainer stops a run on a step
   whose every response failed).

Managers never read a learned reward model's scores: `reinforge.reward.models.RewardModelScorer`
wraps a manager and adds them to its result.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.errors import ConfigError, DataError, RewardError, UserError
from reinforge.reward.manager.calls import ScoreTimeout, WorkerError, call_coroutines, call_inline, function_name, is_async
from reinforge.reward.manager.pool import ScoringPool
from reinforge.reward.registry import default_compute_score
from reinforge.user_code import checked_subclass, class_label, user_call

_MANAGERS: dict[str, type] = {}
_COMMON_ARGS = {"tokenizer", "compute_score", "reward_fn_key", "num_examine", "prompt_key"}  # given by the trainer
KWARGS = "reward_model.reward_kwargs"
WATCHDOG_ENV = "REINFORGE_REWARD_WATCHDOG_S"  # seconds before the warning about a call with no time limit (default 300)


def register_reward_manager(name: str) -> Callable[[type], type]:
    """Class decorator: make a reward manager available as `reward_model.reward_manager=<name>`.

    The class is made as verl makes its managers, `cls(tokenizer=, num_examine=, compute_score=,
    reward_fn_key=, **reward_kwargs)`, and called as `manager(batch, return_dict=False)`; a subclass
    of `RewardManager` only writes `_compute` (and `close()` is there for the end of the run)."""

    def register(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, RewardManager)):
            raise ConfigError(f"@register_reward_manager({name!r}) on {getattr(cls, '__name__', cls)!r}: a reward manager "
                              "here subclasses reinforge.reward.manager.RewardManager and writes _compute(samples) (one "
                              "result per row); verl's managers, called with its DataProto, do not run here (ARCHITECTURE.md)")
        _MANAGERS[name] = cls
        return cls

    return register


def is_users(name: str) -> bool:
    """Whether the reward manager `name` is a class of the user's (registered from a module outside reinforge)."""
    cls = _MANAGERS.get(name)
    return cls is not None and not cls.__module__.startswith("reinforge.")


def reward_manager_names() -> list[str]:
    """Names accepted by `reward_model.reward_manager`."""
    return sorted(_MANAGERS)


def make_reward_manager(
    name: str,
    tokenizer: Any,
    compute_score: Callable[..., Any] | None = None,
    reward_fn_key: str = "data_source",
    num_examine: int = 0,
    reward_workers: int | None = None,
    **reward_kwargs: Any,
) -> Any:
    """The reward manager registered as `name`; `reward_kwargs` (reward_model.reward_kwargs) go to
    its constructor, and `reward_workers` (reward.num_workers) as `num_workers` to one that takes it,
    unless they set it. `compute_score` None means `default_compute_score`."""
    if name not in _MANAGERS:
        raise ConfigError(f"reward_model.reward_manager={name!r} is unknown; choose one of {reward_manager_names()}")
    cls = _MANAGERS[name]
    parameters = inspect.signature(cls).parameters
    if reward_workers is not None and "num_workers" in parameters:
        reward_kwargs.setdefault("num_workers", reward_workers)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = sorted(set(reward_kwargs) - set(parameters))
    if unknown and not takes_any:
        raise ConfigError(
            f"{KWARGS} {unknown} are not options of the {name!r} reward manager; "
            f"its options are {sorted(set(parameters) - _COMMON_ARGS) or 'none'}"
        )
    arguments = dict(tokenizer=tokenizer, num_examine=num_examine, compute_score=compute_score, reward_fn_key=reward_fn_key,
                     **reward_kwargs)
    if not is_users(name):
        return cls(**arguments)
    # the user's class: what it raises, made or called, is an error naming it (a subclass made for it calls it)
    where = f"the reward manager {name!r} ({class_label(cls)})"

    def checked_call(self, batch: Batch, return_dict: bool = False):
        with user_call(f"{where}, called on a batch of {len(batch)} rows", RewardError):
            return cls.__call__(self, batch, return_dict=return_dict)

    checked = checked_subclass(cls, {"__call__": checked_call})
    with user_call(where, RewardError):
        return checked(**arguments)


@dataclass
class Sample:
    """One row to score; `response_length` counts valid response tokens."""

    row: int
    data_source: Any
    solution_str: str
    ground_truth: Any
    extra_info: Any
    response_length: int

    def call_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of verl's `compute_score(data_source, solution_str, ground_truth, extra_info)`."""
        return {"data_source": self.data_source, "solution_str": self.solution_str, "ground_truth": self.ground_truth,
                "extra_info": self.extra_info}


class ScoreFunctionError(Exception):
    """The reward function returned something that is not a score."""


class RewardManager:
    """Base of the managers: everything but which calls of the reward function a batch makes (`_compute`).

    The constructor's first four parameters are verl's, in verl's order; `compute_score` None means
    `default_compute_score`. `processes` is the number of worker processes that call the reward
    function (`prime`); None gives one to a sync function with `timeout_s` (only a process can be
    stopped at its time limit) and none otherwise.
    """

    needs_ground_truth = True  # every row must have reward_model.ground_truth (verl's functions are called with it)
    missing_ground_truth: Any = None  # a row's ground_truth when it has none (without needs_ground_truth)

    def __init__(self, tokenizer: Any, num_examine: int, compute_score: Callable[..., Any] | None, reward_fn_key: str,
                 timeout_s: float | None, processes: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = default_compute_score if compute_score is None else compute_score
        self._check_signature(self.compute_score)
        self.reward_fn_key = reward_fn_key
        self.timeout_s = check_timeout(timeout_s)
        self._pool: ScoringPool | None = None
        self._reported: set[str] = set()  # "error", "timeout": kinds of failure already printed
        self.last_failure: str | None = None  # the first failed row of the latest call, in one line (see failure_summary)
        reason = f"The {type(self).__name__}"
        if processes is None and self.timeout_s is not None and not is_async(self.compute_score):
            processes, reason = 1, f"{reason} with {KWARGS}.timeout_s set"
        if processes:
            self._pool = ScoringPool(self.compute_score, processes, self.timeout_s, reason=reason)

    def __call__(self, batch: Batch, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        samples = self._samples(batch)
        scores, extras, plain, metrics = self._parse(samples, self._watched_compute(samples))
        rewards, shaping_info = self._shape(samples, scores)

        responses = batch["responses"]
        reward_tensor = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)  # (batch, response_len)
        # The score goes on the last token the model generated: the last response token, or, in a multi-turn
        # conversation that ended on a tool or user message, the last token with response_mask 1 (GAE skips the others).
        mask = batch["response_mask"] if "response_mask" in batch else None
        for sample, reward in zip(samples, rewards, strict=True):
            if sample.response_length > 0:
                last = sample.response_length - 1
                if mask is not None and not mask[sample.row, last]:
                    generated = mask[sample.row, :last].nonzero()
                    last = int(generated[-1]) if len(generated) else last
                reward_tensor[sample.row, last] = reward
        self._examine(batch, samples, scores)
        if not return_dict:
            return reward_tensor
        return {
            "reward_tensor": reward_tensor,
            "reward_extra_info": {**_extra_info_lists(scores, extras), **shaping_info},
            "reward_metrics": metrics,
            "plain_scores": plain,
        }

    def close(self) -> None:
        """Stop the worker processes of this manager, if it has any (a later call starts new ones)."""
        if self._pool is not None:
            self._pool.close()

    def _compute(self, samples: list[Sample]) -> list[Any]:
        """Each row's reward-function result, or the exception in its place."""
        raise NotImplementedError

    def _watched_compute(self, samples: list[Sample]) -> list[Any]:
        """`_compute`; without a time limit (timeout_s), a warning if it runs longer than the watchdog's seconds."""
        if self.timeout_s is not None:
            return self._compute(samples)
        seconds = float(os.environ.get(WATCHDOG_ENV) or 300)
        watchdog = threading.Timer(seconds, self._warn_slow, args=(len(samples), seconds))
        watchdog.daemon = True
        watchdog.start()
        try:
            return self._compute(samples)
        finally:
            watchdog.cancel()

    def _warn_slow(self, responses: int, seconds: float) -> None:
        print(
            f"reinforge: warning: the reward function {function_name(self.compute_score)} has been scoring "
            f"{responses} responses for {seconds:g} s with no time limit; it may be stuck. Set {KWARGS}.timeout_s="
            "<seconds> so that a call that takes longer scores 0 (counted in reward/timeouts) and the run goes on.",
            file=sys.stderr, flush=True,
        )

    def _check_signature(self, fn: Callable[..., Any]) -> None:
        """RewardError, before any call, when `fn` cannot take the keyword arguments `_compute` calls it with
        (here verl's per-response ones, those of `Sample.call_kwargs`)."""
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and some callables have none to check
            return
        arguments = ("data_source", "solution_str", "ground_truth", "extra_info")
        try:
            signature.bind(**dict.fromkeys(arguments))
        except TypeError as error:
            raise RewardError(
                f"the reward function {function_name(fn)} has the parameters {signature}, but the {type(self).__name__} "
                f"calls it as fn({', '.join(arguments)}) ({error}). Define it as def {getattr(fn, '__name__', 'fn')}"
                "(data_source, solution_str, ground_truth, extra_info=None, **kwargs)."
            ) from None

    def _call(self, calls: list[dict[str, Any]], max_concurrency: int) -> list[Any]:
        """`compute_score(**kwargs)` for each call: in the worker processes when the manager has them, else
        awaited concurrently (`async def`, `max_concurrency` at a time) or one after another here."""
        if self._pool is not None:
            return self._pool.map(calls)
        if is_async(self.compute_score):
            return call_coroutines(self.compute_score, calls, max_concurrency, self.timeout_s)
        return call_inline(self.compute_score, calls)

    def _shape(self, samples: list[Sample], scores: list[float]) -> tuple[list[float], dict[str, list[Any]]]:
        """Each row's reward from its score, plus extra-info lists about the shaping; by default the scores."""
        return scores, {}

    def _parse(self, samples: list[Sample], results: list[Any]
               ) -> tuple[list[float], list[dict[str, Any]], list[bool], dict[str, int]]:
        """Scores and other dict keys (0.0 and none for a failed row), whether each row's result was a plain number
        (or failed: no dict either), and the counts of failed rows."""
        scores: list[float] = []
        extras: list[dict[str, Any]] = []
        plain: list[bool] = []
        metrics = {"reward/errors": 0, "reward/timeouts": 0}
        failed: list[str | None] = []  # why each failed row failed, in one line
        self.last_failure = None
        for sample, result in zip(samples, results, strict=True):
            score, extra, failure = 0.0, {}, None
            if isinstance(result, UserError):  # a setup mistake, not a bad row
                raise result
            error: BaseException | None = None
            if isinstance(result, ScoreTimeout):
                metrics["reward/timeouts"] += 1
                failure = self._report("timeout", error := result, sample)
            elif isinstance(result, (Exception, asyncio.CancelledError, SystemExit)):  # user code fails only its own row
                metrics["reward/errors"] += 1
                failure = self._report("error", error := result, sample)
            else:
                try:
                    score, extra = _parse_result(result)
                except ScoreFunctionError as parse_error:
                    metrics["reward/errors"] += 1
                    failure = self._report("error", error := parse_error, sample)
            self.last_failure = self.last_failure or failure
            scores.append(score)
            extras.append(extra)
            plain.append(failure is not None or not isinstance(result, dict))
            failed.append(None if error is None else f"the reward function failed: {_one_line(error)}")
        # a failed row's score is 0, and so is its accuracy where its data source's rows record one; where rows record a
        # reason (the code scorer's), a failed row's is why it failed, for the rollout dumps
        with_acc = {sample.data_source for sample, extra in zip(samples, extras, strict=True) if "acc" in extra}
        with_reason = any("reason" in extra for extra in extras)
        extras = [extra if why is None else {**({"acc": 0.0} if sample.data_source in with_acc else {}),
                                             **({"reason": why} if with_reason else {})}
                  for sample, extra, why in zip(samples, extras, failed, strict=True)]
        return scores, extras, plain, metrics

    def _decode_response(self, token_ids: list[int]) -> str:
        """The solution_str of a row's valid response tokens."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _samples(self, batch: Batch) -> list[Sample]:
        needed = ("prompts", "responses", "attention_mask", *(("reward_model", self.reward_fn_key) if self.needs_ground_truth else ()))
        for key in needed:
            if key not in batch:
                raise DataError(f"the reward manager needs batch field {key!r}; the batch has {sorted(batch.keys())}")
        prompt_len = batch["prompts"].shape[1]
        responses = batch["responses"]  # (batch, response_len)
        response_lengths = batch["attention_mask"][:, prompt_len:].sum(dim=-1).tolist()
        if batch["attention_mask"].shape[1] != prompt_len + responses.shape[1]:
            raise DataError(
                f"attention_mask has {batch['attention_mask'].shape[1]} columns; expected prompts + responses = "
                f"{prompt_len} + {responses.shape[1]}"
            )
        extra_infos = list(batch["extra_info"]) if "extra_info" in batch else [None] * len(batch)
        # as verl 0.9's reward loop: every row's extra_info has num_turns (2 for a single-turn rollout: the prompt and the
        # response) and rollout_reward_scores (what tools, interactions and environments scored in a multi-turn one)
        turns = batch["__num_turns__"] if "__num_turns__" in batch else [2] * len(batch)
        scores = batch["reward_scores"] if "reward_scores" in batch else [{} for _ in range(len(batch))]
        # verl's agent loop hands its reward function turn_scores and tool_rewards (lists, empty without an interaction
        # or a tool call) at the top level
        lists = ("turn_scores", "tool_rewards") if "__num_turns__" in batch else ()
        extra_infos = [{**(info or {}), "num_turns": turns[i], "rollout_reward_scores": scores[i],
                        **{key: scores[i].get(key, []) for key in lists}} for i, info in enumerate(extra_infos)]
        sources = batch[self.reward_fn_key] if self.reward_fn_key in batch else ["unknown"] * len(batch)
        return [
            Sample(
                row=i,
                data_source=sources[i],
                solution_str=self._decode_response(responses[i, :length].tolist()),
                ground_truth=(_ground_truth(batch["reward_model"][i], sources[i], extra_infos[i]) if self.needs_ground_truth
                              else _optional_ground_truth(batch, i, self.missing_ground_truth)),
                extra_info=extra_infos[i],
                response_length=int(length),
            )
            for i, length in enumerate(response_lengths)
        ]

    def failure_summary(self) -> str:
        """The reward function and the first failed row of the latest call, for an error that stops the run."""
        return f"the reward function {function_name(self.compute_score)}; first failure {self.last_failure}"

    def _report(self, kind: str, error: BaseException, sample: Sample) -> str:
        """Print the first failure of each kind (later ones are only counted); returns the failure in one line."""
        failure = f"{self._where(sample, error).split(';')[0]}: {_one_line(error)}"
        if kind in self._reported:
            return failure
        self._reported.add(kind)
        what = "did not finish in time" if kind == "timeout" else "failed"
        if isinstance(error, WorkerError):  # its message is the traceback in the worker
            lines = str(error)
        elif isinstance(error, (ScoreTimeout, ScoreFunctionError)):  # reinforge's findings: no traceback to show
            lines = f"{type(error).__name__}: {error}"
        else:
            lines = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        print(
            f"reinforge: the reward function {what} {self._where(sample, error)}. "
            f"Later ones are only counted in {self._counted_in(kind)}.\n{lines}",
            file=sys.stderr,
        )
        return failure

    def _counted_in(self, kind: str) -> str:
        """Where failures of `kind` after the first are counted."""
        return f"the metric {'reward/timeouts' if kind == 'timeout' else 'reward/errors'}"

    def _where(self, sample: Sample, error: BaseException) -> str:
        """Where a failure happened and what it cost, for the printed report."""
        return f"on row {sample.row} (data_source={sample.data_source!r}); the row scores 0.0"

    def _examine(self, batch: Batch, samples: list[Sample], scores: list[float]) -> None:
        """Print up to `num_examine` decoded samples per data source (verl's debugging output)."""
        printed: dict[Any, int] = {}
        for sample, score in zip(samples, scores, strict=True):
            if printed.get(sample.data_source, 0) >= self.num_examine:
                continue
            printed[sample.data_source] = printed.get(sample.data_source, 0) + 1
            print(f"[data_source] {sample.data_source}")
            print(f"[prompt] {self._decode_prompt(batch, sample.row)}")
            print(f"[response] {sample.solution_str}")
            print(f"[ground_truth] {sample.ground_truth}")
            print(f"[score] {score}")

    def _decode_prompt(self, batch: Batch, row: int) -> str:
        prompts = batch["prompts"]  # (batch, prompt_len), left-padded
        prompt_mask = batch["attention_mask"][row, : prompts.shape[1]]
        return self.tokenizer.decode(prompts[row][prompt_mask.bool()].tolist(), skip_special_tokens=True)


def check_timeout(timeout_s: Any) -> float | None:
    """`reward_kwargs.timeout_s` checked: None (no limit) or a positive number of seconds."""
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < float(timeout_s) < math.inf:
        raise ConfigError(f"{KWARGS}.timeout_s={timeout_s!r} must be a positive number of seconds, or null for no limit")
    return float(timeout_s)


def check_count(name: str, value: Any) -> int:
    """A `reward_kwargs` option that must be a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{KWARGS}.{name}={value!r} must be a positive integer")
    return value


def _optional_ground_truth(batch: Batch, row: int, missing: Any) -> Any:
    """Row `row`'s reward_model.ground_truth as it is (None too), `missing` when it has none."""
    reward_model = batch["reward_model"][row] if "reward_model" in batch else None
    return reward_model["ground_truth"] if isinstance(reward_model, dict) and "ground_truth" in reward_model else missing


def _ground_truth(reward_model: Any, data_source: Any, extra_info: Any) -> Any:
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        index = extra_info.get("index") if isinstance(extra_info, dict) else None
        raise DataError(
            f"the data row with extra_info.index={index} (data_source={data_source!r}) has reward_model={reward_model!r}; "
            "the reward_model column must hold a dict with a 'ground_truth' key (verl's schema)"
        )
    return reward_model["ground_truth"]


def _parse_result(result: Any) -> tuple[float, dict[str, Any]]:
    """(score, other keys) of a reward function's result; ScoreFunctionError when it is not a score. A plain number's
    other key is `acc`, the number, as verl's reward loop records it (validation's core variable is acc)."""
    extra: dict[str, Any] | None = None
    score = result
    if isinstance(result, dict):
        if "score" not in result:
            raise ScoreFunctionError(f"the reward function returned a dict without a 'score' key: {result!r}")
        score = result["score"]
        extra = {key: value for key, value in result.items() if key != "score"}
    try:
        value = real_number(score)
    except ValueError as error:
        what = f"{{'score': {error}, ...}}" if extra is not None else str(error)  # the dict's score: say so
        raise ScoreFunctionError(f"the reward function returned {what}; expected a number or a dict with 'score'") from None
    if not math.isfinite(value):
        raise ScoreFunctionError(f"the reward function returned a non-finite score {score!r}")
    return value, {"acc": value} if extra is None else extra


def real_number(value: Any) -> float:
    """`value` as a float: a Python, numpy or 0-d torch number (bools 0/1); ValueError saying what it is otherwise (a
    type that is not a number, an int past a float's range)."""
    if isinstance(value, (np.ndarray, np.generic, torch.Tensor)) and value.ndim == 0:  # np.bool_ too
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise ValueError(f"{type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int past float's range
        raise ValueError(f"an int of {int(value).bit_length()} bits, too large for a float") from None


def _one_line(error: BaseException) -> str:
    """An error in one line: its type and message, and where it was raised (a worker's: the traceback's last line)."""
    if isinstance(error, WorkerError):
        return str(error).strip().splitlines()[-1]
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, (ScoreTimeout, ScoreFunctionError)):  # reinforge's findings: where they were raised says nothing
        return text
    frames = traceback.extract_tb(error.__traceback__)
    return f"{text} (raised at {frames[-1].filename}, line {frames[-1].lineno})" if frames else text


def _extra_info_lists(scores: list[float], extras: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """`score` plus every key of any dict result, one value per row (None where a row lacks the key)."""
    keys = list(dict.fromkeys(key for extra in extras for key in extra))
    info: dict[str, list[Any]] = {"score": list(scores)}
    for key in keys:
        info[key] = [extra.get(key) for extra in extras]
    return info
