"""Load the user's reward function named by `custom_reward_function.{path,name,reward_kwargs}`.

The file is imported by `reinforge.user_code.import_user_module` (unique module names, its own
folder importable, errors with the line they came from). `reward_kwargs` are bound with `functools.partial` and checked against the
function's signature up front. Every failure is a `RewardError` that names the file and says
what is wrong. Without a custom function, `get_compute_score` binds the Sandbox Fusion settings
(`reward_model.sandbox_fusion`) to `default_compute_score`. This module does not call the
function; the reward manager does.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from reinforge.errors import RewardError
from reinforge.reward.manager.pool import worker_context
from reinforge.reward.registry import default_compute_score
from reinforge.user_code import import_user_module

if TYPE_CHECKING:
    from reinforge.config.schema import Config


def load_reward_function(config: Config) -> Callable[..., Any] | None:
    """The function of `config.custom_reward_function` with its `reward_kwargs` bound, or None
    when no path is set."""
    spec = config.custom_reward_function
    if not spec.path:
        return None
    path = Path(spec.path).expanduser().resolve()
    module = import_user_module(str(path), "custom_reward_function.path", RewardError)
    fn = _get_function(module, spec.name, path)
    kwargs = dict(spec.reward_kwargs or {})
    if not kwargs:
        return fn
    _check_kwargs(fn, kwargs, spec.name, path)
    return functools.partial(fn, **kwargs)


def get_compute_score(config: Config) -> Callable[..., Any]:
    """The custom reward function when `custom_reward_function.path` is set, else `default_compute_score`;
    with `reward_model.sandbox_fusion.url` set, the latter has the url, a semaphore of `max_concurrent`
    and `memory_limit_mb` bound, as verl's main_ppo does. The semaphore lives in a multiprocessing
    manager (a server process), so that it can be pickled and is shared by every thread and worker
    process that scores with the returned function. A custom function gets no sandbox arguments."""
    custom = load_reward_function(config)
    if custom is not None:
        return custom
    sandbox = config.reward_model.sandbox_fusion
    if not sandbox.url:
        return default_compute_score
    return functools.partial(
        default_compute_score,
        sandbox_fusion_url=sandbox.url,
        concurrent_semaphore=_shared_semaphore(sandbox.max_concurrent),
        memory_limit_mb=sandbox.memory_limit_mb,
    )


def _shared_semaphore(value: int) -> Any:
    """A semaphore usable from threads and from worker processes it is pickled to. Its manager process is
    started as the reward workers are (so that the forkserver it may start has their preload); it stays
    alive as long as the semaphore."""
    return worker_context().Manager().Semaphore(value)


def _get_function(module: ModuleType, name: str, path: Path) -> Callable[..., Any]:
    if not hasattr(module, name):
        defined = sorted(
            attr
            for attr, value in vars(module).items()
            if callable(value) and not attr.startswith("_") and getattr(value, "__module__", None) == module.__name__
        )
        raise RewardError(
            f"custom_reward_function.name: {path} defines no {name!r}; the functions it defines are "
            f"{defined or 'none'}. Set custom_reward_function.name to one of them."
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise RewardError(f"custom_reward_function.name: {name!r} in {path} is a {type(fn).__name__}, not a function")
    return fn


def _check_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any], name: str, path: Path) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind_partial(**kwargs)
    except TypeError as error:
        raise RewardError(
            f"custom_reward_function.reward_kwargs {sorted(kwargs)} do not fit {name}{signature} in {path}: {error}"
        ) from error
