"""Load the user's reward function named by `custom_reward_function.{path,name,reward_kwargs}`.

The file is imported under a unique module name (so two reward files both called `reward.py`
do not collide), with its own folder on `sys.path` while it is imported so that it can import
sibling modules. `reward_kwargs` are bound with `functools.partial` and checked against the
function's signature up front. Every failure is a `RewardError` that names the file and says
what is wrong. This module does not call the function; the reward manager does.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from reinforge.errors import RewardError
from reinforge.reward.registry import default_compute_score

if TYPE_CHECKING:
    from reinforge.config.schema import Config


def load_reward_function(config: Config) -> Callable[..., Any] | None:
    """The function of `config.custom_reward_function` with its `reward_kwargs` bound, or None
    when no path is set."""
    spec = config.custom_reward_function
    if not spec.path:
        return None
    path = Path(spec.path).expanduser().resolve()
    module = _import_file(path)
    fn = _get_function(module, spec.name, path)
    kwargs = dict(spec.reward_kwargs or {})
    if not kwargs:
        return fn
    _check_kwargs(fn, kwargs, spec.name, path)
    return functools.partial(fn, **kwargs)


def get_compute_score(config: Config) -> Callable[..., Any]:
    """The custom reward function when `custom_reward_function.path` is set, else `default_compute_score`."""
    return load_reward_function(config) or default_compute_score


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        problem = "is a folder, not a Python file" if path.is_dir() else "does not exist"
        raise RewardError(f"custom_reward_function.path: {path} {problem}")
    module_name = f"reinforge_custom_reward_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    import_spec = importlib.util.spec_from_file_location(module_name, path)
    if import_spec is None or import_spec.loader is None:
        raise RewardError(f"custom_reward_function.path: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(import_spec)
    sys.modules[module_name] = module  # dataclasses and pickle look the module up here
    sys.path.insert(0, str(path.parent))
    try:
        import_spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        sys.modules.pop(module_name, None)
        raise RewardError(f"custom_reward_function.path: importing {path} failed: {_describe(error, path)}") from error
    finally:
        sys.path.remove(str(path.parent))
    return module


def _describe(error: BaseException, path: Path) -> str:
    """The error with the line of `path` where it happened, e.g. `line 3: import foo -> ModuleNotFoundError: ...`."""
    message = f"{type(error).__name__}: {error}"
    if isinstance(error, SyntaxError) and error.filename == str(path):
        return f"line {error.lineno}: {(error.text or '').strip()} -> {type(error).__name__}: {error.msg}"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == str(path)]
    if frames:
        return f"line {frames[-1].lineno}: {(frames[-1].line or '').strip()} -> {message}"
    return message


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
