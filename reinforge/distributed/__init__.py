"""Worker groups: the indirection between the trainer and where workers run (in this process, or Ray actors)."""

from reinforge.distributed.worker_group import (
    Dispatch,
    LocalPool,
    LocalWorkerGroup,
    WorkerGroup,
    WorkerPool,
    open_worker_pool,
    register,
)

__all__ = ["Dispatch", "LocalPool", "LocalWorkerGroup", "WorkerGroup", "WorkerPool", "open_worker_pool",
           "register"]
