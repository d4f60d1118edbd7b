"""How a reward manager calls the reward function: inline, or as coroutines with a cap and a time limit.

- `call_inline(fn, calls)`: one call after another in this thread; no time limit is possible
  here (a Python thread cannot be stopped), so managers send sync functions that need one to
  worker processes (`reinforge.reward.manager.pool`).
- `call_coroutines(fn, calls, max_concurrency, timeout_s)`: for `async def` functions; at most
  `max_concurrency` calls are in flight, each is cancelled after `timeout_s` seconds. A coroutine
  that blocks the event loop (sync work inside `async def`) cannot be interrupted by the time
  limit; one that swallows its cancellation keeps the call waiting.

Both return one entry per call: the function's result, or the exception that replaces it
(`ScoreTimeout` for a call past its time limit). `sys.exit()` in the function fails its call like an
exception (its `SystemExit` is returned), so it cannot end the run. Deciding what is a valid score is
the manager's job.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class ScoreTimeout(Exception):
    """A call of the reward function did not finish within its time limit."""


class WorkerError(Exception):
    """The reward function failed in a worker process; the message holds the worker's traceback."""

# the parameters that tell which framework a reward function was written for (reward/loading.py, trl.py, openrlhf.py)
VERL_PARAMETERS = frozenset({"solution_str", "solution_strs"})  # verl's per-response and batch functions
COMPLETION_PARAMETERS = frozenset({"completions", "completion_ids"})  # TRL's


def is_async(fn: Callable[..., Any]) -> bool:
    """True for an `async def` function, a functools.partial of one, or an object whose `__call__` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def function_name(fn: Callable[..., Any]) -> str:
    """How error messages name a reward function: `name` plus the file that defines it when known (each of them, for
    TRL reward functions)."""
    from reinforge.reward.manager.openrlhf import OpenRLHFRewardFunction, OpenRLHFRewardServer
    from reinforge.reward.manager.trl import TRLRewardFunctions

    if isinstance(fn, TRLRewardFunctions):
        return fn.describe()
    while isinstance(fn, (functools.partial, OpenRLHFRewardFunction)):
        fn = fn.func
    if isinstance(fn, OpenRLHFRewardServer):
        return f"{fn.url} (a reward server)"
    name = getattr(fn, "__qualname__", type(fn).__name__)
    file = getattr(sys.modules.get(getattr(fn, "__module__", None) or ""), "__file__", None)
    return f"{name} ({file})" if file else name


def call_inline(fn: Callable[..., Any], calls: list[dict[str, Any]]) -> list[Any]:
    """`fn(**kwargs)` for each call in turn; an exception is returned in place of its result."""
    results: list[Any] = []
    for kwargs in calls:
        try:
            results.append(fn(**kwargs))
        except (Exception, SystemExit) as error:  # user code fails only its own call
            results.append(error)
    return results


def call_coroutines(fn: Callable[..., Any], calls: list[dict[str, Any]], max_concurrency: int,
                    timeout_s: float | None) -> list[Any]:
    """Await `fn(**kwargs)` for every call, `max_concurrency` at a time, each cancelled after `timeout_s` (None: no limit)."""

    async def call(kwargs: dict[str, Any]) -> Any:
        try:
            return await fn(**kwargs)
        except SystemExit as error:  # asyncio would re-raise it out of the event loop
            return error

    async def one(semaphore: asyncio.Semaphore, kwargs: dict[str, Any]) -> Any:
        async with semaphore:
            task = asyncio.ensure_future(call(kwargs))
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
            if not done:
                task.cancel()
                return ScoreTimeout(f"the reward function did not return within timeout_s={timeout_s} s; the call was cancelled")
            try:
                return task.result()
            except (Exception, asyncio.CancelledError) as error:
                return error

    async def gather() -> list[Any]:
        semaphore = asyncio.Semaphore(max_concurrency)
        return await asyncio.gather(*(one(semaphore, kwargs) for kwargs in calls))

    return run_coroutine(gather())


def run_coroutine(coroutine: Awaitable[Any]) -> Any:
    """Run `coroutine` to completion in a fresh event loop; in a worker thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reinforge-reward") as pool:
        return pool.submit(asyncio.run, coroutine).result()
