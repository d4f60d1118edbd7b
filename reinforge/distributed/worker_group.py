"""Worker groups: how the trainer calls a role's workers without knowing where they run.

The trainer only ever writes `group.method(batch)`. A worker class marks each public method
with how its input is spread over the workers (`@register(Dispatch.DP)`: the Batch is split by
data-parallel rank, as `layout.py` lays it out, and the results are put back in the caller's row
order; `Dispatch.ALL`: every worker gets
the same arguments and rank 0's result is returned). `LocalWorkerGroup` holds the workers in
this process (world size 1 on one machine); a Ray worker group will hold the same classes as Ray
actors and implement the same two dispatch modes.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from reinforge.batch import Batch
from reinforge.distributed.layout import gather_from_ranks, split_for_ranks


class Dispatch(enum.Enum):
    DP = "dp"    # split the Batch over ranks, concatenate the results
    ALL = "all"  # same arguments to every rank, rank 0's result


def register(dispatch: Dispatch) -> Callable[[Callable], Callable]:
    """Mark a worker method as callable through a worker group, with its dispatch mode."""

    def decorator(fn: Callable) -> Callable:
        fn._dispatch = dispatch
        return fn

    return decorator


class WorkerGroup(ABC):
    """A set of workers of one class; public registered methods are called through it."""

    balance_batch = False  # trainer.balance_batch: even out the ranks' token counts within each block of rows

    @property
    @abstractmethod
    def world_size(self) -> int: ...

    @abstractmethod
    def _call_all(self, method: str, per_rank_args: list[tuple[tuple, dict]]) -> list[Any]:
        """Call `method` on every rank with that rank's arguments; results in rank order."""

    @abstractmethod
    def _dispatch_mode(self, method: str) -> Dispatch: ...

    def __getattr__(self, method: str) -> Callable:
        if method.startswith("_"):
            raise AttributeError(method)
        mode = self._dispatch_mode(method)

        def call(*args, **kwargs):
            if mode is Dispatch.DP:
                (batch,) = args
                if self.world_size == 1:
                    results = self._call_all(method, [((batch,), kwargs)])
                    return results[0] if isinstance(results[0], Batch) else results
                pieces, order, pad = split_for_ranks(batch, self.world_size, self.balance_batch)
                return gather_from_ranks(self._call_all(method, [((piece,), kwargs) for piece in pieces]), order, pad)
            return self._call_all(method, [(args, kwargs)] * self.world_size)[0]

        call.__name__ = method
        return call


class LocalWorkerGroup(WorkerGroup):
    """Workers in this process: one per rank, called in order (world size 1 on one device)."""

    def __init__(self, worker_cls: type, *args, world_size: int = 1, **kwargs):
        self.worker_cls = worker_cls
        self.workers = [worker_cls(*args, **kwargs) for _ in range(world_size)]

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def _dispatch_mode(self, method: str) -> Dispatch:
        fn = getattr(self.worker_cls, method, None)
        mode = getattr(fn, "_dispatch", None)
        if mode is None:
            raise AttributeError(f"{self.worker_cls.__name__}.{method} is not a registered worker method")
        return mode

    def _call_all(self, method: str, per_rank_args: list[tuple[tuple, dict]]) -> list[Any]:
        return [getattr(worker, method)(*args, **kwargs) for worker, (args, kwargs) in zip(self.workers, per_rank_args, strict=True)]
