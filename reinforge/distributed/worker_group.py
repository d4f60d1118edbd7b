"""Worker groups: how the trainer calls a role's workers without knowing where they run.

The trainer only ever writes `group.method(batch)`. A worker class marks each public method
with how its input is spread over the workers (`@register(Dispatch.DP)`: the Batch is split by
data-parallel rank, as `layout.py` lays it out, and the results are put back in the caller's row
order; `Dispatch.ALL`: every worker gets
the same arguments and rank 0's result is returned). `LocalWorkerGroup` holds the workers in
this process (world size 1 on one machine); `RayWorkerGroup` (ray_group.py) holds the same classes
in one Ray actor per rank. `open_worker_pool(config)` picks between them, once per run.
"""

from __future__ import annotations

import enum
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from reinforge.batch import Batch
from reinforge.config.schema import Config
from reinforge.distributed.layout import gather_from_ranks, split_for_ranks
from reinforge.errors import ConfigError


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
    """A set of workers of one class (`worker_cls`); public registered methods are called through it."""

    worker_cls: type

    balance_batch = False  # trainer.balance_batch: even out the ranks' token counts within each block of rows

    @property
    @abstractmethod
    def world_size(self) -> int: ...

    @abstractmethod
    def _call_all(self, method: str, per_rank_args: list[tuple[tuple, dict]]) -> list[Any]:
        """Call `method` on every rank with that rank's arguments; results in rank order."""

    def _dispatch_mode(self, method: str) -> Dispatch:
        fn = getattr(self.worker_cls, method, None)
        mode = getattr(fn, "_dispatch", None)
        if mode is None:
            raise AttributeError(f"{self.worker_cls.__name__}.{method} is not a registered worker method")
        return mode

    def __getattr__(self, method: str) -> Callable:
        if method.startswith("_"):
            raise AttributeError(method)
        mode = self._dispatch_mode(method)

        def call(*args, **kwargs):
            if mode is Dispatch.DP:
                (batch,) = args
                return self._call_dp(method, batch, kwargs)
            return self._call_all(method, [(args, kwargs)] * self.world_size)[0]

        call.__name__ = method
        return call

    def _call_dp(self, method: str, batch: Batch, kwargs: dict) -> Batch | list:
        """Rank r gets its share of the rows as layout.py lays them out (a batch whose length is no multiple of the
        world size, a validation batch, is padded by repeating rows); results come back in the caller's row order."""
        if self.world_size == 1:
            results = self._call_all(method, [((batch,), kwargs)])
            return results[0] if isinstance(results[0], Batch) else results
        pieces, order, pad = split_for_ranks(batch, self.world_size, self.balance_batch)
        return gather_from_ranks(self._call_all(method, [((piece,), kwargs) for piece in pieces]), order, pad)


class LocalWorkerGroup(WorkerGroup):
    """Workers in this process: one per rank, called in order (world size 1 on one device)."""

    def __init__(self, worker_cls: type, *args, world_size: int = 1, **kwargs):
        self.worker_cls = worker_cls
        self.workers = [worker_cls(*args, **kwargs) for _ in range(world_size)]

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def _call_all(self, method: str, per_rank_args: list[tuple[tuple, dict]]) -> list[Any]:
        return [getattr(worker, method)(*args, **kwargs) for worker, (args, kwargs) in zip(self.workers, per_rank_args, strict=True)]


class WorkerPool(ABC):
    """Where a run's workers live. `group(role, cls, *args)` builds one worker of `cls` per rank for `role`; the roles
    of one pool share each rank's process (verl's colocation: actor+rollout+ref, critic and reward model together)."""

    @abstractmethod
    def group(self, role: str, worker_cls: type, *args, **kwargs) -> WorkerGroup: ...

    @abstractmethod
    def close(self) -> None:
        """Release the workers' processes and resources (called once, at the end of the run)."""


class LocalPool(WorkerPool):
    """One rank and no Ray cluster: every worker in this process."""

    def group(self, role: str, worker_cls: type, *args, **kwargs) -> WorkerGroup:
        return LocalWorkerGroup(worker_cls, *args, **kwargs)

    def close(self) -> None:
        """Nothing to release: the workers go with the trainer."""


def open_worker_pool(config: Config) -> WorkerPool:
    """The pool of a run: in this process when it has one rank (trainer.nnodes x trainer.n_gpus_per_node) and no Ray
    address is configured (today's fast start, ordinary breakpoints); otherwise one Ray actor per rank (ray_group.py).
    The caller closes it at the end of the run."""
    from reinforge.distributed.process_group import ray_address, world_size_of

    if world_size_of(config) == 1 and ray_address(config) is None:
        return LocalPool()
    # read when ray is first imported: Ray would merge the ranks' identical log lines, their stack dumps included
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        from reinforge.distributed.ray_group import RayPool
    except ModuleNotFoundError as exc:
        if exc.name != "ray":
            raise
        raise ConfigError(f"{world_size_of(config)} rank(s) (trainer.nnodes x trainer.n_gpus_per_node) or a Ray address run "
                          "on Ray, which is not installed: pip install 'reinforge[ray]'") from None
    return RayPool(config)
