"""Worker groups: the indirection between the trainer and where workers run (local now, Ray later)."""

from reinforge.distributed.worker_group import Dispatch, LocalWorkerGroup, WorkerGroup, register

__all__ = ["Dispatch", "LocalWorkerGroup", "WorkerGroup", "register"]
