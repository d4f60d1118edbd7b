"""Load the user's reward function named by `custom_reward_function.{path,name,reward_kwargs}`.

The file (or importable module) is imported by `reinforge.user_code.import_user_module` (unique module names, its own
folder importable, errors with the line they came from). `reward_kwargs` are bound with `functools.partial` and checked against the
function's signature up front. Every failure is a `RewardError` that names the file and says
what is wrong. Without a custom function, `get_compute_score` binds the Sandbox Fusion settings
(`reward_model.sandbox_fusion`) to `default_compute_score`. This module does not call the
function; the reward manager does.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from reinforge.errors import RewardError
from reinforge.reward.manager.calls import COMPLETION_PARAMETERS, VERL_PARAMETERS
from reinforge.reward.manager.openrlhf import OpenRLHFRewardFunction, OpenRLHFRewardServer, is_openrlhf_reward
from reinforge.reward.manager.pool import worker_context
from reinforge.reward.manager.trl import TRLRewardFunctions, is_trl_reward
from reinforge.reward.registry import default_compute_score
from reinforge.user_code import import_user_module

if TYPE_CHECKING:
    from reinforge.config.schema import Config


def load_reward_function(config: Config) -> Callable[..., Any] | None:
    """The function of `config.custom_reward_function` with its `reward_kwargs` bound, or None
    when no path is set. Functions written for TRL (`is_trl_reward`; `name` may list several) come
    back as one `TRLRewardFunctions`, with `reward_weights`, for the `trl` reward manager; one written for OpenRLHF
    (`is_openrlhf_reward`, or named reward_func; `name` defaults to reward_func in a file without compute_score), or
    OpenRLHF's reward server at an http(s) URL, as an `OpenRLHFRewardFunction`, for the `openrlhf` one."""
    spec = config.custom_reward_function
    if not spec.path:
        return None
    if str(spec.path).lower().startswith(("http://", "https://")):  # OpenRLHF's remote reward server (--remote_rm_url)
        return _reward_server(spec)
    if re.fullmatch(r"[\w.-]+:\d+(/.*)?", str(spec.path)) and not Path(spec.path).exists():
        raise RewardError(f"custom_reward_function.path={spec.path} looks like a reward server's address; write it as a "
                          f"URL, http://{spec.path}")
    module = import_user_module(spec.path, "custom_reward_function.path", RewardError)  # a file, or a module's name
    path = Path(spec.path).expanduser().resolve() if Path(spec.path).expanduser().exists() else spec.path  # for messages
    names = [spec.name] if isinstance(spec.name, str) else list(spec.name)
    openrlhf_name = names == ["reward_func"]  # the name OpenRLHF calls, with parameters of any name (it passes them by position)
    if names == ["compute_score"] and callable(getattr(module, "reward_func", None)):  # an OpenRLHF reward function file
        helper = getattr(module, "compute_score", None)
        if helper is None or not (VERL_PARAMETERS | COMPLETION_PARAMETERS | {"prompts"}) & set(_parameters(helper)):
            names, openrlhf_name = ["reward_func"], True
            why = "defines no compute_score" if helper is None else "defines a compute_score that is no reward function's"
            print(f"reinforge: note: custom_reward_function.name: {path} {why} (verl's name, the default); taking "
                  "reward_func, the function OpenRLHF calls", flush=True)
        else:
            print(f"reinforge: note: custom_reward_function.name: {path} defines compute_score, verl's default name, and "
                  "reward_func, OpenRLHF's; taking compute_score (custom_reward_function.name=reward_func takes the other)",
                  flush=True)
    kwargs = dict(spec.reward_kwargs or {})
    functions = []
    for name in names:
        fn = _get_function(module, name, path)
        if kwargs:
            _check_kwargs(fn, kwargs, name, path)
            fn = functools.partial(fn, **kwargs)
        functions.append(fn)
    manager = getattr(getattr(config, "reward_model", None), "reward_manager", None)  # trl, openrlhf: whatever they take
    for name, fn in zip(names, functions, strict=True):
        _check_kind(name, fn, manager)
    other = (VERL_PARAMETERS | COMPLETION_PARAMETERS) & set(_parameters(functions[0]))  # a verl or TRL function's
    if manager == "openrlhf" or any(is_openrlhf_reward(fn) for fn in functions) or (openrlhf_name and not other and manager != "trl"):
        return _openrlhf_function(names, functions, path, getattr(spec, "reward_weights", None))
    trl = [manager == "trl" or is_trl_reward(fn) for fn in functions]
    if any(trl):
        if not all(trl):
            verl = names[trl.index(False)]
            raise RewardError(f"custom_reward_function.name={names}: {verl} in {path} is taken for a verl reward function "
                              "(data_source, solution_str, ground_truth, ...), the others for TRL's; several functions must "
                              f"all be TRL reward functions. {TRL_HINT}")
        trl_functions = TRLRewardFunctions(functions, names, _weights(getattr(spec, "reward_weights", None), names))
        trl_functions.check()
        return trl_functions
    if len(names) > 1:
        raise RewardError(f"custom_reward_function.name={names}: several functions are taken only when they are TRL reward "
                          f"functions (fn(completions, ...) returning a list of rewards); {names[0]} in {path} is taken for a "
                          f"verl one. {TRL_HINT}")
    if getattr(spec, "reward_weights", None) is not None:
        raise RewardError(f"custom_reward_function.reward_weights weighs TRL reward functions; {names[0]} in {path} is a "
                          "verl reward function, whose score is the reward. Remove reward_weights")
    return functions[0]


TRL_HINT = ("A TRL reward function is told by a completions, completion_ids or prompts parameter; for one without, set "
            "reward_model.reward_manager=trl")


def _parameters(fn: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _check_kind(name: str, fn: Callable[..., Any], manager: str | None) -> None:
    """RewardError for a function of no kind as named: one of TRL's factories (get_soft_overlong_punishment, ...),
    which return the reward function, or a verl function (or another framework's) under reward_model.reward_manager=trl
    or =openrlhf."""
    parameters = set(_parameters(fn))
    verl = sorted(VERL_PARAMETERS & parameters)
    if manager in ("trl", "openrlhf") and verl:
        raise RewardError(f"custom_reward_function.name: {name} takes {verl[0]}: it is a verl reward function, and "
                          f"reward_model.reward_manager={manager} calls {'TRL' if manager == 'trl' else 'OpenRLHF'}'s")
    if manager == "trl" and is_openrlhf_reward(fn):
        raise RewardError(f"custom_reward_function.name: {name} takes queries: it is written for OpenRLHF (reward_func("
                          "queries, prompts, labels)), and reward_model.reward_manager=trl calls TRL's; leave "
                          "reward_model.reward_manager at naive (openrlhf is chosen for it)")
    if manager == "openrlhf" and COMPLETION_PARAMETERS & parameters:
        raise RewardError(f"custom_reward_function.name: {name} takes completions: it is written for TRL, and "
                          "reward_model.reward_manager=openrlhf calls OpenRLHF's; leave reward_model.reward_manager at "
                          "naive (trl is chosen for it)")
    if name.startswith("get_") and not verl and not is_trl_reward(fn) and not is_openrlhf_reward(fn):
        raise RewardError(f"custom_reward_function.name: {name} takes neither completions nor completion_ids nor prompts; "
                          f"{name} looks like one of TRL's factories, which return the reward function: build it in a file "
                          f"of your own (reward = {name}(...)) and name that")


def _reward_server(spec: Any) -> OpenRLHFRewardFunction:
    """OpenRLHF's reward server at the URL `spec.path`; RewardError for settings it cannot take."""
    url = str(spec.path)
    if "," in url:
        raise RewardError(f"custom_reward_function.path={url}: one reward server URL is taken (OpenRLHF's list of "
                          "several sends a call for one response to the first); give one")
    for key, value in (("name", spec.name if spec.name != "compute_score" else None), ("reward_kwargs", spec.reward_kwargs),
                       ("reward_weights", getattr(spec, "reward_weights", None))):
        if value:
            raise RewardError(f"custom_reward_function.{key}: custom_reward_function.path={url} is a reward server "
                              f"(OpenRLHF's), which takes no {key}; remove it")
    return OpenRLHFRewardFunction(OpenRLHFRewardServer(url))


def _openrlhf_function(names: list[str], functions: list[Callable[..., Any]], path: Any, weights: Any
                       ) -> OpenRLHFRewardFunction:
    """The one function named, written for OpenRLHF, wrapped to be called as OpenRLHF calls it; RewardError when
    several are named, reward_weights is set, or it cannot take (queries, prompts, labels) positionally."""
    if len(names) > 1:
        raise RewardError(f"custom_reward_function.name={names}: a reward function written for OpenRLHF (queries, "
                          "prompts, labels) scores alone, as OpenRLHF calls one; name one function")
    if weights is not None:
        raise RewardError(f"custom_reward_function.reward_weights weighs TRL reward functions; {names[0]} in {path} is "
                          "written for OpenRLHF, whose 'rewards' are the reward. Remove reward_weights")
    try:
        signature = inspect.signature(functions[0])
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind([], [], [])
        except TypeError as error:
            raise RewardError(f"custom_reward_function.name: {names[0]}{signature} in {path} cannot be called as OpenRLHF "
                              f"calls its reward function, reward_func(queries, prompts, labels), positionally: {error}"
                              ) from None
    return OpenRLHFRewardFunction(functions[0])


def _weights(weights: Any, names: list[str]) -> list[float]:
    """custom_reward_function.reward_weights checked: one number per function (null: 1.0 each)."""
    if weights is None:
        return [1.0] * len(names)
    if (not isinstance(weights, (list, tuple)) or len(weights) != len(names)
            or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights)):
        raise RewardError(f"custom_reward_function.reward_weights={weights!r} must be a list of {len(names)} numbers, one "
                          f"per function of custom_reward_function.name {names}")
    return [float(w) for w in weights]


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
            if callable(value) and not attr.startswith("_")
            and (getattr(value, "__module__", None) or "").startswith(module.__name__)  # a package's: its modules' too
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
