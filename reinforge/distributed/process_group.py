"""torch.distributed inside a worker process: joined from the environment a worker group sets.

A Ray worker group (reinforge/distributed/ray_group.py), or a test spawning processes, sets
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in each rank's process before the
workers are built; the workers call `init_distributed(device)` at the start of `init_model`.
With one rank nothing is initialised and the workers keep plain modules.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from reinforge.config.schema import Config


def init_distributed(device: str) -> None:
    """Join the process group described by the environment when WORLD_SIZE > 1 (once per process).

    gloo on cpu; on cuda NCCL for GPU tensors (gloo for CPU ones) and this rank's GPU is LOCAL_RANK."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if device == "cuda" else "gloo")


def rank() -> int:
    """This process's rank (0 when torch.distributed is not initialised)."""
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    """The number of ranks (1 when torch.distributed is not initialised)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def world_size_of(config: Config) -> int:
    """Ranks a run uses: trainer.nnodes x trainer.n_gpus_per_node (worker processes on cpu), once resolved."""
    return config.trainer.nnodes * config.trainer.n_gpus_per_node


def ray_address(config: Config) -> str | None:
    """The Ray cluster to join: RAY_ADDRESS (set by `ray job submit` and by users), else ray_kwargs.ray_init.address;
    None: a run with more than one rank starts its own Ray."""
    return os.environ.get("RAY_ADDRESS") or (config.ray_kwargs.get("ray_init") or {}).get("address")
