"""The `dapo` reward manager (DAPO, arXiv:2503.14476): `naive` plus eos stripping and overlong reward shaping; also
registered as verl's `gdpo` and `naive_gdpo`, which score the same way (GDPO's reward components are the keys the
reward function returns beside `score`, named by `algorithm.gdpo_reward_keys`).

It scores like `naive` (same calls, options `timeout_s` and `max_concurrency`, errors and
timeouts), with these differences:

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
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reinforge.errors import ConfigError
from reinforge.reward.manager.base import KWARGS, Sample, register_reward_manager
from reinforge.reward.manager.naive import NaiveRewardManager


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


@register_reward_manager("naive_gdpo")
@register_reward_manager("gdpo")  # verl's GDPO manager scores as its DAPO one; the components are the function's extra keys
@register_reward_manager("dapo")
class DAPORewardManager(NaiveRewardManager):
    """`naive` plus DAPO's eos stripping and overlong reward shaping; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        max_resp_len: int | None = None,
        overlong_buffer_cfg: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        max_concurrency: int = 64,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s, max_concurrency)
        self.max_resp_len = max_resp_len
        self.overlong_buffer = overlong_buffer(max_resp_len, overlong_buffer_cfg)

    def _decode_response(self, token_ids: list[int]) -> str:
        text = super()._decode_response(token_ids)
        eos = getattr(self.tokenizer, "eos_token", None)
        if isinstance(eos, str) and eos and text.endswith(eos):
            text = text[: -len(eos)]
        return text

    def _shape(self, samples: list[Sample], scores: list[float]) -> tuple[list[float], dict[str, list[Any]]]:
        buffer = self.overlong_buffer
        if buffer is None:
            return scores, {}
        penalties = [buffer.penalty(sample.response_length) for sample in samples]
        rewards = [score + penalty for score, penalty in zip(scores, penalties, strict=True)]
        if not buffer.log:
            return rewards, {}
        return rewards, {"overlong_reward": penalties, "overlong": [penalty < 0 for penalty in penalties]}


def overlong_buffer(max_resp_len: Any, cfg: Any) -> OverlongBuffer | None:
    """The checked overlong settings, or None when shaping is off."""
    if max_resp_len is not None and (isinstance(max_resp_len, bool) or not isinstance(max_resp_len, int) or max_resp_len <= 0):
        raise ConfigError(f"{KWARGS}.max_resp_len={max_resp_len!r} must be a positive integer (a token count) or null")
    if cfg is None:
        return None
    key = f"{KWARGS}.overlong_buffer_cfg"
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
            f"{key}.enable=true needs {KWARGS}.max_resp_len (the rollout's response length in tokens), "
            f"e.g. +{KWARGS}.max_resp_len=<data.max_response_length>"
        )
    if length is None:
        raise ConfigError(f"{key}.enable=true needs {key}.len (the buffer length in tokens)")
    if isinstance(length, bool) or not isinstance(length, int) or not 0 < length < max_resp_len:
        raise ConfigError(f"{key}.len={length!r} must be an integer with 0 < len < {KWARGS}.max_resp_len={max_resp_len}")
    if (
        isinstance(penalty_factor, bool)
        or not isinstance(penalty_factor, numbers.Real)
        or not math.isfinite(float(penalty_factor))
        or penalty_factor < 0
    ):
        raise ConfigError(f"{key}.penalty_factor={penalty_factor!r} must be a finite number >= 0")
    return OverlongBuffer(max_resp_len=max_resp_len, len=length, penalty_factor=float(penalty_factor), log=log)

