"""Route a sample to its rule-based scorer by `data_source`, and let users add scorers.

`default_compute_score` is the reward function used when no `custom_reward_function.path` is
given. It looks the data source up among registered scorers: exact names first, then the
longest registered prefix (so `countdown_3to4` finds the `countdown` prefix). Scorers have the
task-scorer signature `fn(solution_str, ground_truth, **kwargs)`; `extra_info` is passed only to
scorers that declare an `extra_info` parameter (or `**kwargs`). The Sandbox Fusion arguments of
verl's signature (`sandbox_fusion_url`, `concurrent_semaphore`, `memory_limit_mb`) are passed only
to scorers that declare `sandbox_fusion_url` (the code scorer), and only when not None. Registering
a name again replaces the earlier scorer.

This module does not decode tokens or handle errors raised by scorers: the reward manager does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from reinforge.errors import RewardError
from reinforge.reward.scorers import code, countdown, digits, geo3k, gsm8k, math, math_dapo, qa_em, text_env

Scorer = Callable[..., Any]
_F = TypeVar("_F", bound=Scorer)

_EXACT: dict[str, Scorer] = {}
_PREFIX: dict[str, Scorer] = {}


def register_scorer(name: str, fn: _F | None = None, *, prefix: bool = False) -> Any:
    """Register `fn` as the scorer of data source `name` (every data source starting with `name`
    when `prefix`). Use as a call, `register_scorer("my_task", fn)`, or as a decorator,
    `@register_scorer("my_task")`. Returns `fn` (or the decorator)."""
    if not name:
        raise ValueError("register_scorer needs a non-empty data source name")

    def register(scorer: _F) -> _F:
        if not callable(scorer):
            raise TypeError(f"scorer for {name!r} must be callable, got {type(scorer).__name__}")
        (_PREFIX if prefix else _EXACT)[name] = scorer
        return scorer

    return register if fn is None else register(fn)


class UnknownDataSource(RewardError, NotImplementedError):
    """No scorer for the data source: a RewardError (a user mistake, reported without a traceback) that is also the
    NotImplementedError verl's default_compute_score raises there, so a custom reward function that falls back to
    its own scoring on that error works unchanged."""


def known_data_sources() -> list[str]:
    """Registered data sources; prefixes are shown as `name*`."""
    return sorted(_EXACT) + sorted(f"{name}*" for name in _PREFIX)


def find_scorer(data_source: str) -> Scorer:
    """The scorer registered for `data_source`; UnknownDataSource when there is none."""
    if data_source in _EXACT:
        return _EXACT[data_source]
    matches = [name for name in _PREFIX if str(data_source).startswith(name)]
    if matches:
        return _PREFIX[max(matches, key=len)]
    raise UnknownDataSource(
        f"no reward function for data_source {data_source!r}. Built-in scorers exist for: "
        f"{', '.join(known_data_sources())}. For other data, write a function "
        "compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) in a Python file "
        "and pass custom_reward_function.path=<file> (and custom_reward_function.name=<function> if it is "
        "not called compute_score)."
    )


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    sandbox_fusion_url: str | None = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: int | None = None,
    **kwargs: Any,
) -> Any:
    """Score one response with the scorer registered for `data_source`; `kwargs` go to the scorer.
    Code data sources run in Sandbox Fusion when `sandbox_fusion_url` is given, else in the local sandbox."""
    scorer = find_scorer(data_source)
    if extra_info is not None and _accepts_extra_info(scorer):
        kwargs["extra_info"] = extra_info
    if _accepts_sandbox(scorer):
        sandbox = {"sandbox_fusion_url": sandbox_fusion_url, "concurrent_semaphore": concurrent_semaphore,
                   "memory_limit_mb": memory_limit_mb}
        kwargs.update({key: value for key, value in sandbox.items() if value is not None})
    return scorer(solution_str, ground_truth, **kwargs)


def _accepts_extra_info(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "extra_info" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _accepts_sandbox(fn: Callable[..., Any]) -> bool:
    try:
        return "sandbox_fusion_url" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


register_scorer("openai/gsm8k", gsm8k.compute_score)
for _name in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "numina_aops_forum",
              "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads"):
    register_scorer(_name, math.compute_score)
for _name in ("math_dapo", "math", "math_dapo_reasoning"):
    register_scorer(_name, math_dapo.compute_score)
register_scorer("aime", math_dapo.compute_score, prefix=True)
register_scorer("countdown", countdown.compute_score, prefix=True)
register_scorer("reinforge/add_one", digits.compute_score)
register_scorer("hiyouga/geometry3k", geo3k.compute_score)
register_scorer("text_env/", text_env.compute_score, prefix=True)
for _name in code.CODE_DATA_SOURCES:
    register_scorer(_name, code.compute_score)
for _name in qa_em.SEARCH_R1_DATA_SOURCES:
    register_scorer(_name, qa_em.compute_score)
