"""Route a sample to its rule-based scorer by `data_source`, and let users add scorers.

`default_compute_score` is the reward function used when no `custom_reward_function.path` is
given. It looks the data source up among registered scorers: exact names first, then the
longest registered prefix (so `countdown_3to4` finds the `countdown` prefix). Scorers have the
task-scorer signature `fn(solution_str, ground_truth, **kwargs)`; `extra_info` is passed only to
scorers that declare an `extra_info` parameter (or `**kwargs`). Registering a name again
replaces the earlier scorer.

This module does not decode tokens or handle errors raised by scorers: the reward manager does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from reinforge.errors import RewardError
from reinforge.reward.scorers import countdown, digits, gsm8k, math

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


def known_data_sources() -> list[str]:
    """Registered data sources; prefixes are shown as `name*`."""
    return sorted(_EXACT) + sorted(f"{name}*" for name in _PREFIX)


def find_scorer(data_source: str) -> Scorer:
    """The scorer registered for `data_source`; RewardError when there is none."""
    if data_source in _EXACT:
        return _EXACT[data_source]
    matches = [name for name in _PREFIX if str(data_source).startswith(name)]
    if matches:
        return _PREFIX[max(matches, key=len)]
    raise RewardError(
        f"no reward function for data_source {data_source!r}. Built-in scorers exist for: "
        f"{', '.join(known_data_sources())}. For other data, write a function "
        "compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) in a Python file "
        "and pass custom_reward_function.path=<file> (and custom_reward_function.name=<function> if it is "
        "not called compute_score)."
    )


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> Any:
    """Score one response with the scorer registered for `data_source`; `kwargs` go to the scorer."""
    scorer = find_scorer(data_source)
    if extra_info is not None and _accepts_extra_info(scorer):
        kwargs["extra_info"] = extra_info
    return scorer(solution_str, ground_truth, **kwargs)


def _accepts_extra_info(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "extra_info" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


register_scorer("openai/gsm8k", gsm8k.compute_score)
for _name in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"):
    register_scorer(_name, math.compute_score)
register_scorer("countdown", countdown.compute_score, prefix=True)
register_scorer("reinforge/add_one", digits.compute_score)
