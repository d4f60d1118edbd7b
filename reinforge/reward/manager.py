"""Reward managers: turn a Batch of generated responses into token-level rewards.

A reward manager decodes each response, calls the reward function (`compute_score`, the verl
contract `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`)
and writes the score at the last valid response token of a `(batch, response_len)` float32
tensor. Managers are registered by name (`reward_model.reward_manager`); `naive` calls the
function once per sample, `dapo` does the same and adds DAPO's overlong reward shaping.

Decided behaviours of `naive`:

- A score may be a number (int, float, bool, numpy scalar) or a dict with a numeric "score".
  Every row's score goes to `reward_extra_info["score"]`; the other keys of dict scores become
  lists with one value per row, None for rows whose score lacks the key (or failed).
- `async def` reward functions are awaited concurrently (asyncio.gather) in one event loop per
  call; if the calling thread already runs a loop, that loop is run in a worker thread.
- A reward function that raises, or returns something that is not a finite number or a dict
  with one, scores 0.0 for that row; errors are counted in `reward/errors` and the first one of
  a manager instance is printed to stderr with its traceback, row and data source. A reinforge
  `UserError` (e.g. the RewardError of an unknown data_source) is a setup mistake that would
  zero every reward, so it stops the call instead.
- A zero-length response gets no token reward; its score is still recorded in the extra info.

`dapo` (DAPO, arXiv:2503.14476) scores like `naive`, with these differences:

- A decoded response that still ends with the tokenizer's eos_token string (an EOS that is not a
  special token) has it stripped before scoring.
- With `reward_kwargs.overlong_buffer_cfg.enable=true`, a response of L valid tokens gets
  `min(0, -(L - (max_resp_len - len)) / len * penalty_factor)` added to its score: no penalty up
  to `max_resp_len - len` tokens, then a linear one reaching `-penalty_factor` at `max_resp_len`.
  The penalty depends only on the length, so it applies to rows whose reward function failed
  too. `reward_extra_info["score"]` keeps the task score; `log=true` adds the lists
  `overlong_reward` (float) and `overlong` (bool, penalty < 0).
- `overlong_buffer_cfg` takes `enable` (False), `len` (required when enabled, 0 < len <
  max_resp_len), `penalty_factor` (1.0, >= 0) and `log` (False); `max_resp_len` is required when
  enabled. Mistakes fail at construction with a ConfigError.

Managers do not load reward functions (see `reinforge.reward.loading`), do not run learned
reward models, and impose no time limit on a reward function.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.errors import ConfigError, DataError, UserError
from reinforge.reward.registry import default_compute_score

_MANAGERS: dict[str, type] = {}
_COMMON_ARGS = {"tokenizer", "compute_score", "reward_fn_key", "num_examine"}


def register_reward_manager(name: str) -> Callable[[type], type]:
    """Class decorator: make a reward manager available as `reward_model.reward_manager=<name>`."""

    def register(cls: type) -> type:
        _MANAGERS[name] = cls
        return cls

    return register


def reward_manager_names() -> list[str]:
    """Names accepted by `reward_model.reward_manager`."""
    return sorted(_MANAGERS)


def make_reward_manager(
    name: str,
    tokenizer: Any,
    compute_score: Callable[..., Any] | None = None,
    reward_fn_key: str = "data_source",
    num_examine: int = 0,
    **reward_kwargs: Any,
) -> Any:
    """The reward manager registered as `name`; `reward_kwargs` (reward_model.reward_kwargs) go to
    its constructor. `compute_score` None means `default_compute_score`."""
    if name not in _MANAGERS:
        raise ConfigError(f"reward_model.reward_manager={name!r} is unknown; choose one of {reward_manager_names()}")
    cls = _MANAGERS[name]
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    unknown = sorted(set(reward_kwargs) - set(parameters))
    if unknown and not takes_any:
        raise ConfigError(
            f"reward_model.reward_kwargs {unknown} are not options of the {name!r} reward manager; "
            f"its options are {sorted(set(parameters) - _COMMON_ARGS) or 'none'}"
        )
    return cls(
        tokenizer=tokenizer,
        compute_score=compute_score or default_compute_score,
        reward_fn_key=reward_fn_key,
        num_examine=num_examine,
        **reward_kwargs,
    )


@dataclass
class _Sample:
    """One row to score; `response_length` counts valid response tokens."""

    row: int
    data_source: Any
    solution_str: str
    ground_truth: Any
    extra_info: Any
    response_length: int


class ScoreFunctionError(Exception):
    """The reward function returned something that is not a score."""


@register_reward_manager("naive")
class NaiveRewardManager:
    """Scores each sample with one `compute_score` call; see the module docstring for details."""

    def __init__(
        self,
        tokenizer: Any,
        compute_score: Callable[..., Any] = default_compute_score,
        reward_fn_key: str = "data_source",
        num_examine: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.num_examine = num_examine
        self._error_printed = False

    def __call__(self, batch: Batch, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        samples = self._samples(batch)
        scores, extras, errors = self._score(samples)
        rewards, shaping_info = self._shape(samples, scores)

        responses = batch["responses"]
        reward_tensor = torch.zeros(
            responses.shape, dtype=torch.float32, device=responses.device
        )  # (batch, response_len)
        for sample, reward in zip(samples, rewards, strict=True):
            if sample.response_length > 0:
                reward_tensor[sample.row, sample.response_length - 1] = reward
        self._examine(batch, samples, scores)
        if not return_dict:
            return reward_tensor
        return {
            "reward_tensor": reward_tensor,
            "reward_extra_info": {**_extra_info_lists(scores, extras), **shaping_info},
            "reward_metrics": {"reward/errors": errors},
        }

    def _score(self, samples: list[_Sample]) -> tuple[list[float], list[dict[str, Any]], int]:
        """Each row's score and other dict keys (0.0 and none for a failed row), and the number of failures."""
        results = _call_all(self.compute_score, samples)
        scores: list[float] = []
        extras: list[dict[str, Any]] = []
        errors = 0
        for sample, result in zip(samples, results, strict=True):
            try:
                score, extra = _parse_result(result)
            except UserError:
                raise
            except (Exception, asyncio.CancelledError) as error:  # user code fails only its own row
                errors += 1
                self._report_error(error, sample)
                score, extra = 0.0, {}
            scores.append(score)
            extras.append(extra)
        return scores, extras, errors

    def _shape(self, samples: list[_Sample], scores: list[float]) -> tuple[list[float], dict[str, list[Any]]]:
        """Each row's reward from its score, plus extra-info lists about the shaping; `naive` keeps the scores."""
        return scores, {}

    def _decode_response(self, token_ids: list[int]) -> str:
        """The solution_str of a row's valid response tokens."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _samples(self, batch: Batch) -> list[_Sample]:
        for key in ("prompts", "responses", "attention_mask", "reward_model", self.reward_fn_key):
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
        extra_infos = batch["extra_info"] if "extra_info" in batch else [None] * len(batch)
        return [
            _Sample(
                row=i,
                data_source=batch[self.reward_fn_key][i],
                solution_str=self._decode_response(responses[i, :length].tolist()),
                ground_truth=_ground_truth(batch["reward_model"][i], batch[self.reward_fn_key][i], extra_infos[i]),
                extra_info=extra_infos[i],
                response_length=int(length),
            )
            for i, length in enumerate(response_lengths)
        ]

    def _report_error(self, error: BaseException, sample: _Sample) -> None:
        if self._error_printed:
            return
        self._error_printed = True
        lines = "".join(traceback.format_exception(error))
        print(
            f"reinforge: the reward function failed on row {sample.row} (data_source={sample.data_source!r}); "
            f"the row scores 0.0. Later failures are only counted in the metric reward/errors.\n{lines}",
            file=sys.stderr,
        )

    def _examine(self, batch: Batch, samples: list[_Sample], scores: list[float]) -> None:
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


@dataclass(frozen=True)
class OverlongBuffer:
    """DAPO's soft overlong punishment: the last `len` tokens before `max_resp_len` cost up to `penalty_factor`."""

    max_resp_len: int
    len: int
    penalty_factor: float = 1.0
    log: bool = False

    def penalty(self, response_length: int) -> float:
        """The (non-positive) reward added to a response of `response_length` valid tokens."""
        exceed = response_length - (self.max_resp_len - self.len)
        return min(-exceed / self.len * self.penalty_factor, 0.0) + 0.0  # + 0.0 turns -0.0 into 0.0


_OVERLONG_KEYS = ("enable", "len", "penalty_factor", "log")
_KWARGS = "reward_model.reward_kwargs"


@register_reward_manager("dapo")
class DAPORewardManager(NaiveRewardManager):
    """`naive` plus DAPO's eos stripping and overlong reward shaping; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        compute_score: Callable[..., Any] = default_compute_score,
        reward_fn_key: str = "data_source",
        num_examine: int = 0,
        max_resp_len: int | None = None,
        overlong_buffer_cfg: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(tokenizer, compute_score, reward_fn_key=reward_fn_key, num_examine=num_examine)
        self.max_resp_len = max_resp_len
        self.overlong_buffer = _overlong_buffer(max_resp_len, overlong_buffer_cfg)

    def _decode_response(self, token_ids: list[int]) -> str:
        text = super()._decode_response(token_ids)
        eos = getattr(self.tokenizer, "eos_token", None)
        if isinstance(eos, str) and eos and text.endswith(eos):
            text = text[: -len(eos)]
        return text

    def _shape(self, samples: list[_Sample], scores: list[float]) -> tuple[list[float], dict[str, list[Any]]]:
        buffer = self.overlong_buffer
        if buffer is None:
            return scores, {}
        penalties = [buffer.penalty(sample.response_length) for sample in samples]
        rewards = [score + penalty for score, penalty in zip(scores, penalties, strict=True)]
        if not buffer.log:
            return rewards, {}
        return rewards, {"overlong_reward": penalties, "overlong": [penalty < 0 for penalty in penalties]}


def _overlong_buffer(max_resp_len: Any, cfg: Any) -> OverlongBuffer | None:
    """The checked overlong settings, or None when shaping is off."""
    if max_resp_len is not None and (isinstance(max_resp_len, bool) or not isinstance(max_resp_len, int) or max_resp_len <= 0):
        raise ConfigError(f"{_KWARGS}.max_resp_len={max_resp_len!r} must be a positive integer (a token count) or null")
    if cfg is None:
        return None
    key = f"{_KWARGS}.overlong_buffer_cfg"
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{key}={cfg!r} must be a dict with keys {list(_OVERLONG_KEYS)}")
    unknown = sorted(set(cfg) - set(_OVERLONG_KEYS))
    if unknown:
        raise ConfigError(f"{key} has unknown keys {unknown}; the allowed keys are {list(_OVERLONG_KEYS)}")
    enable, log = cfg.get("enable", False), cfg.get("log", False)
    length, penalty_factor = cfg.get("len"), cfg.get("penalty_factor", 1.0)
    for name, value in (("enable", enable), ("log", log)):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}.{name}={value!r} must be true or false")
    if not enable:
        return None
    if max_resp_len is None:
        raise ConfigError(
            f"{key}.enable=true needs {_KWARGS}.max_resp_len (the rollout's response length in tokens), "
            f"e.g. +{_KWARGS}.max_resp_len=<data.max_response_length>"
        )
    if length is None:
        raise ConfigError(f"{key}.enable=true needs {key}.len (the buffer length in tokens)")
    if isinstance(length, bool) or not isinstance(length, int) or not 0 < length < max_resp_len:
        raise ConfigError(f"{key}.len={length!r} must be an integer with 0 < len < {_KWARGS}.max_resp_len={max_resp_len}")
    if (
        isinstance(penalty_factor, bool)
        or not isinstance(penalty_factor, numbers.Real)
        or not math.isfinite(float(penalty_factor))
        or penalty_factor < 0
    ):
        raise ConfigError(f"{key}.penalty_factor={penalty_factor!r} must be a finite number >= 0")
    return OverlongBuffer(max_resp_len=max_resp_len, len=length, penalty_factor=float(penalty_factor), log=log)


def _ground_truth(reward_model: Any, data_source: Any, extra_info: Any) -> Any:
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        index = extra_info.get("index") if isinstance(extra_info, dict) else None
        raise DataError(
            f"the data row with extra_info.index={index} (data_source={data_source!r}) has reward_model={reward_model!r}; "
            "the reward_model column must hold a dict with a 'ground_truth' key (verl's schema)"
        )
    return reward_model["ground_truth"]


def _call_all(compute_score: Callable[..., Any], samples: list[_Sample]) -> list[Any]:
    """Each sample's result or the exception it raised; awaitable results are awaited together."""
    results: list[Any] = []
    pending: dict[int, Awaitable[Any]] = {}
    for sample in samples:
        try:
            result = compute_score(
                data_source=sample.data_source,
                solution_str=sample.solution_str,
                ground_truth=sample.ground_truth,
                extra_info=sample.extra_info,
            )
        except Exception as error:  # reported when the results are parsed
            result = error
        if inspect.isawaitable(result):
            pending[len(results)] = result
        results.append(result)
    if pending:
        for row, value in zip(pending, _await_all(list(pending.values())), strict=True):
            results[row] = value
    return results


def _await_all(awaitables: list[Awaitable[Any]]) -> list[Any]:
    """Run the awaitables concurrently in a fresh event loop; exceptions are returned, not raised."""

    async def gather() -> list[Any]:
        return await asyncio.gather(*awaitables, return_exceptions=True)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reinforge-reward") as pool:
        return pool.submit(asyncio.run, gather()).result()


def _parse_result(result: Any) -> tuple[float, dict[str, Any]]:
    """(score, other keys) of a reward function result; raises for exceptions and non-scores."""
    if isinstance(result, BaseException):
        raise result
    extra: dict[str, Any] = {}
    score = result
    if isinstance(result, dict):
        if "score" not in result:
            raise ScoreFunctionError(f"the reward function returned a dict without a 'score' key: {result!r}")
        score = result["score"]
        extra = {key: value for key, value in result.items() if key != "score"}
    if isinstance(score, (np.ndarray, torch.Tensor)) and score.ndim == 0:
        score = score.item()
    if not isinstance(score, numbers.Real):
        raise ScoreFunctionError(
            f"the reward function returned {type(score).__name__} {score!r}; expected a number or a dict with 'score'"
        )
    if not math.isfinite(float(score)):
        raise ScoreFunctionError(f"the reward function returned a non-finite score {score!r}")
    return float(score), extra


def _extra_info_lists(scores: list[float], extras: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """`score` plus every key of any dict result, one value per row (None where a row lacks the key)."""
    keys = list(dict.fromkeys(key for extra in extras for key in extra))
    info: dict[str, list[Any]] = {"score": list(scores)}
    for key in keys:
        info[key] = [extra.get(key) for extra in extras]
    return info
