"""Worker processes that call a reward function, each call with a time limit.

`ScoringPool(fn, processes, timeout_s, reason)` runs calls of `fn` in up to `processes` worker
processes. A call that has not returned `timeout_s` seconds after it was handed to a worker is
given up: the worker and every process it started (its process group) are killed with SIGKILL,
the call's entry becomes a `ScoreTimeout`, and a fresh worker takes the next call. A reward
function stuck in a loop, on a dead connection or in a child process costs its row and
`timeout_s` seconds, never the run, and leaves no process behind. A worker that dies in a call
(a crash, `os._exit`) costs that row a `WorkerError` and is replaced too.

How the function reaches the workers. Workers are started by multiprocessing's `forkserver`
(`spawn` where there is none), not `fork`: a forked child would inherit the training process's
threads (torch's, the asynchronous reward thread) in whatever state they were in, which can
deadlock it. So the function travels by pickle, that is by module and name (a functools.partial
with its arguments). Files imported with `reinforge.user_code` (the `custom_reward_function.path`
file, ...) are modules a worker cannot import by name, so each worker first imports again, by
path and under the same module names, the ones whose functions or classes the pickled function
refers to, then unpickles it (so a scorer that another user file adds with `register_scorer` is
unknown to `default_compute_score` in a worker). A lambda or a nested function cannot travel:
the pool refuses it when it is created, with a RewardError that says to define it at the top
level of a file. The forkserver preloads `reinforge.reward`, so workers start without importing
torch again. As with any multiprocessing not started by `fork`, each worker imports the script
being run (`__main__`) under another name, so a script must keep its entry under
`if __name__ == "__main__":` (the `reinforge` command does); in exchange, functions defined in
that script can be sent.

Results come back by pickle; one that cannot be pickled fails its row. An exception raised by the
function comes back as a `WorkerError` holding the worker's traceback, except reinforge's own
`UserError`s (e.g. an unknown data_source), which come back as themselves so that the manager can
stop on them. A time limit counts from the moment a worker receives the call; starting a worker
(importing the user's files) has its own limit of 120 s.

Workers start on the first `map`, serve later calls too, and are killed by `close()`, when the
pool is garbage-collected, or at interpreter exit; they are daemon processes in their own process
groups, so Ctrl-C in a terminal reaches only the training process, and they ignore SIGINT anyway
(sent by other means, or in the moment before a new worker leaves the terminal's group): a call in
progress finishes, so the trainer's graceful stop (finish the step, save) sees every row scored.
One thread uses a pool at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
import types
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from reinforge.errors import RewardError, UserError
from reinforge.reward.manager.calls import ScoreTimeout, WorkerError, function_name
from reinforge.user_code import import_user_module

_USER_MODULE_PREFIX = "reinforge_user_"  # the names reinforge.user_code gives the files it imports
_START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class _Payload:
    """What a worker needs to rebuild the reward function."""

    sys_path: list[str]
    user_files: list[str]
    function: bytes


class ScoringPool:
    """Calls of one reward function in worker processes; see the module docstring."""

    def __init__(self, fn: Callable[..., Any], processes: int, timeout_s: float | None, reason: str) -> None:
        self.processes = processes
        self.timeout_s = timeout_s
        self._payload = _payload(fn, reason)
        self._context = worker_context()
        self._workers: list[_Worker] = []
        weakref.finalize(self, _stop_all, self._workers)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [worker.process.pid for worker in self._workers if worker.process.pid is not None]

    def map(self, calls: list[dict[str, Any]]) -> list[Any]:
        """`fn(**kwargs)` for each call, in parallel: its result, or the exception in its place
        (`ScoreTimeout`, `WorkerError`, a `UserError`)."""
        while len(self._workers) < min(self.processes, len(calls)):
            self._workers.append(_Worker(self._context, self._payload))
        try:
            return self._run(calls)
        except BaseException:  # e.g. a worker that cannot load the function: no worker keeps a call of this map
            self.close()
            raise

    def _run(self, calls: list[dict[str, Any]]) -> list[Any]:
        results: list[Any] = [None] * len(calls)
        todo = deque(range(len(calls)))
        idle = list(self._workers)
        busy: dict[Connection, tuple[_Worker, int, float]] = {}  # connection -> (worker, row, deadline)
        while todo or busy:
            while todo and idle:
                worker, row = idle.pop(), todo.popleft()
                error = worker.send(calls[row])
                if error is None:
                    busy[worker.conn] = (worker, row, time.monotonic() + (self.timeout_s or 0.0))
                else:
                    results[row] = error
                    idle.append(worker if worker.process.is_alive() else self._replace(worker))
            if not busy:
                continue
            for conn in wait(list(busy), timeout=self._wait_s(busy)):
                worker, row, _ = busy.pop(conn)
                results[row] = worker.receive()
                idle.append(worker if worker.process.is_alive() else self._replace(worker))
            now = time.monotonic()
            for conn, (worker, row, deadline) in list(busy.items()):
                if self.timeout_s is not None and now >= deadline:
                    del busy[conn]
                    results[row] = ScoreTimeout(f"the reward function did not return within timeout_s={self.timeout_s} s; "
                                                "its worker process was killed")
                    idle.append(self._replace(worker))
        return results

    def close(self) -> None:
        """Kill every worker (and what it started); a later `map` starts new ones."""
        _stop_all(self._workers)

    def _wait_s(self, busy: dict[Connection, tuple[_Worker, int, float]]) -> float | None:
        if self.timeout_s is None:
            return None
        return max(0.0, min(deadline for *_, deadline in busy.values()) - time.monotonic())

    def _replace(self, worker: _Worker) -> _Worker:
        worker.stop()
        fresh = _Worker(self._context, self._payload)
        self._workers[self._workers.index(worker)] = fresh
        return fresh


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, context: Any, payload: _Payload) -> None:
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_conn, payload), daemon=True, name="reinforge-reward")
        self.process.start()
        self.started = _start_time(self.process.pid)  # tells this worker from a later process given its pid
        child_conn.close()
        self.ready = False

    def send(self, kwargs: dict[str, Any]) -> Exception | None:
        """Hand the worker a call; the error that keeps it from getting there, if any."""
        self._wait_ready()
        try:
            data = pickle.dumps(kwargs)
        except Exception as error:
            return WorkerError(f"the call's arguments cannot be sent to a worker process: {type(error).__name__}: {error}")
        try:
            self.conn.send_bytes(data)
        except OSError:
            self.stop()
            return WorkerError(f"the reward worker process had exited (exit code {self.process.exitcode})")
        return None

    def receive(self) -> Any:
        """The worker's answer to its call: the result or the exception in its place."""
        try:
            kind, *detail = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(timeout=5)
            return WorkerError(f"the reward worker process exited (exit code {self.process.exitcode}) during the call")
        except Exception as error:  # the result was sent but cannot be unpickled here
            return WorkerError(f"the result cannot be read back from the worker: {type(error).__name__}: {error}")
        if kind == "ok":
            return detail[0]
        text, user_error = detail
        return user_error or WorkerError(text)

    def stop(self) -> None:
        """Kill the worker and its process group; wait for it. When the forkserver that started it has died (a SIGTERM
        to the trainer's process group), multiprocessing reports a living worker as exited (code 255), so a worker whose
        pid still has its start time is killed too, else it would be left running on its own."""
        ours = self.started is not None and _start_time(self.process.pid) == self.started
        if ours or self.process.is_alive():
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # the worker leads its own group (see _serve)
            except (AttributeError, ProcessLookupError, PermissionError):  # no process groups here, or not set up yet
                self.process.kill()
        self.process.join()
        self.conn.close()

    def _wait_ready(self) -> None:
        if self.ready:
            return
        if not self.conn.poll(_START_TIMEOUT_S):
            self.stop()
            raise RewardError(f"a reward worker process did not start within {_START_TIMEOUT_S:.0f} s "
                              "(importing the reward function's file took too long or hung)")
        try:
            kind, detail = self.conn.recv()
        except EOFError:
            self.process.join(timeout=5)
            raise RewardError(f"a reward worker process exited while starting (exit code {self.process.exitcode})") from None
        if kind == "failed":
            self.stop()
            raise RewardError(f"a reward worker process could not load the reward function:\n{detail}")
        self.ready = True


def _payload(fn: Callable[..., Any], reason: str) -> _Payload:
    """The picklable description of `fn`; RewardError when it cannot be sent to a worker process."""
    pickler = _ModuleRecorder(buffer := io.BytesIO())
    try:
        pickler.dump(fn)
    except Exception as error:
        raise RewardError(
            f"{reason} calls the reward function in worker processes, which receive it by module and name; "
            f"{function_name(fn)} cannot be sent there ({type(error).__name__}: {error}). Define it at the top level "
            "of a Python file (a def, not a lambda or a function inside another) and name that file with "
            "custom_reward_function.path."
        ) from None
    user_files = [sys.modules[name].__file__ for name in sorted(pickler.modules) if name.startswith(_USER_MODULE_PREFIX)]
    # the current folder too: a function named by module (custom_reward_function.path=my_rewards) was imported from it
    sys_path = [*sys.path, *([os.getcwd()] if os.getcwd() not in sys.path else [])]
    return _Payload(sys_path=sys_path, user_files=user_files, function=buffer.getvalue())


class _ModuleRecorder(pickle.Pickler):
    """A pickler that notes the modules of the functions and classes it pickles by reference."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)) and isinstance(getattr(obj, "__module__", None), str):
            self.modules.add(obj.__module__)
        return NotImplemented  # pickle it the usual way


def worker_context() -> Any:
    """The multiprocessing context of reward worker processes: forkserver (preloading `reinforge.reward`), else spawn;
    never fork, which would copy the training process's threads in whatever state they are in."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["reinforge.reward"])  # takes effect when the server first starts
        return context
    return multiprocessing.get_context("spawn")


def _start_time(pid: int | None) -> str | None:
    """When process `pid` started (field 22 of /proc/<pid>/stat, in clock ticks since boot); None where there is no
    such process or no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    workers.clear()


def _serve(conn: Connection, payload: _Payload) -> None:
    """A worker's life: rebuild the function, then answer calls until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle (graceful stop), never a worker's
    if hasattr(os, "setpgrp"):
        os.setpgrp()  # its own process group: killing the group also kills what the function started
    try:
        sys.path[:] = payload.sys_path
        for file in payload.user_files:
            import_user_module(file, "custom_reward_function.path", RewardError)
        fn = pickle.loads(payload.function)
    except BaseException:
        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", None))
    while True:
        try:
            kwargs = conn.recv()
        except EOFError:  # the training process closed the pool or exited
            return
        try:
            result = fn(**kwargs)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
            conn.send(("ok", result))
        except BaseException as error:  # including a result that cannot be pickled
            conn.send(("error", traceback.format_exc(), error if isinstance(error, UserError) else None))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
