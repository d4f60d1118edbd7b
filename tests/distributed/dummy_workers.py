"""A small worker class for the Ray worker group tests (pickled by value: Ray's processes cannot import tests/)."""

import os
import time

import torch
import torch.distributed as dist

from reinforge.batch import Batch
from reinforge.distributed import Dispatch, register
from reinforge.distributed.process_group import init_distributed

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class Probe:
    """Reports where it runs; raises or sleeps on request."""

    def __init__(self, tag: str):
        self.tag = tag

    @register(Dispatch.DP)
    def describe(self, batch: Batch) -> Batch:
        """Each row's value, with the rank, pid, tag and environment of the worker that saw it."""
        rows = len(batch)
        env = {key: [os.environ.get(key)] * rows for key in ENV_KEYS}
        return Batch({"x": batch["x"], "pid": torch.full((rows,), os.getpid())},
                     {"name": batch["name"], "tag": [self.tag] * rows, **env})

    @register(Dispatch.ALL)
    def all_reduce(self, value: float) -> float:
        """Sum over ranks of value x (rank + 1), through torch.distributed (gloo)."""
        init_distributed("cpu")
        tensor = torch.tensor([value * (dist.get_rank() + 1)])
        dist.all_reduce(tensor)
        return tensor.item()

    @register(Dispatch.ALL)
    def fail_on(self, rank: int, error: Exception) -> None:
        if int(os.environ["RANK"]) == rank:
            raise error

    @register(Dispatch.ALL)
    def write_fails(self, code: int) -> None:
        """A write that fails as torch's native writer fails on a full disk: a RuntimeError caused by the OSError."""
        try:
            raise OSError(code, os.strerror(code), "/run/global_step_2/actor/model_world_size_2_rank_0.pt")
        except OSError as error:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64") from error

    @register(Dispatch.DP)
    def adv_estimators(self, batch: Batch) -> Batch:
        """For each row, the advantage estimators registered in the process of the rank that saw it."""
        from reinforge.algorithm import adv_estimator_names

        return Batch({"x": batch["x"]}, {"estimators": [adv_estimator_names()] * len(batch)})

    @register(Dispatch.ALL)
    def sleep(self, seconds: float) -> str:
        time.sleep(seconds)
        return "slept"
