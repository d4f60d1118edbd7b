"""The process group of a worker: which rank this process is, and how many there are.

A Ray worker group (or a test that spawns processes) sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT in each process before the workers are built; `init_distributed`
joins the group from them. Without those variables, or with WORLD_SIZE=1, nothing is
initialised and every helper answers as the single rank 0 of 1, so a one-process run takes
exactly the code path it always did.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_distributed(device: str) -> None:
    """Join the process group described by the environment when WORLD_SIZE > 1 and it is not joined yet
    (gloo on cpu; gloo for cpu tensors and nccl for cuda ones on cuda, with this process on cuda:LOCAL_RANK)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return
    if device.startswith("cuda"):
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="cpu:gloo,cuda:nccl")
    else:
        dist.init_process_group(backend="gloo")


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1
