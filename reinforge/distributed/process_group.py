"""The data-parallel process group: joining it from the environment, the rank and size, sums over ranks.

A worker group (Ray, or a test's spawned processes) starts one process per rank with RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set; `init_distributed` (called by every
worker's `init_model`) joins them into one torch.distributed group. With one rank nothing is
initialised and every helper here is the identity, so a single-process run takes exactly the
code path it always had.
"""

from __future__ import annotations

import atexit
import os

import torch
import torch.distributed as dist

from reinforge.config.schema import Config

# the oldest torch whose FSDP2 trains over gloo, on CPU ranks: in 2.6 it fails on the CPU stream (no record_event), and
# 2.7 and 2.8 sum the ranks' gradients where they should average them (tests/training/test_fsdp.py; CUDA ranks are not
# affected)
CPU_RANKS_TORCH = "2.9"


def check_cpu_ranks(ranks: int) -> None:
    """ConfigError when this torch cannot train `ranks` > 1 ranks on the CPU (CPU_RANKS_TORCH)."""
    from packaging.version import Version

    if ranks > 1 and Version(torch.__version__).release < Version(CPU_RANKS_TORCH).release:  # 2.9's pre-releases pass
        from reinforge.errors import ConfigError

        raise ConfigError(f"{ranks} ranks on the CPU need torch {CPU_RANKS_TORCH} or newer, and this is torch {torch.__version__}, "
                          "whose FSDP2 over gloo does not train correctly there: upgrade torch, or train on one rank")


def init_distributed(device: str) -> None:
    """Join the process group the environment describes (gloo on cpu; gloo for CPU tensors and nccl for CUDA ones
    on cuda, with this process's GPU set to LOCAL_RANK); nothing when WORLD_SIZE is 1 or the group already exists.
    The group is destroyed when the process exits: left to the interpreter's teardown, gloo's threads can abort a
    rank that has finished its work (SIGABRT, "terminate called without an active exception")."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1 or dist.is_initialized():
        return
    backend = "gloo"
    if device == "cuda":
        local_rank, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
        if local_rank >= gpus:
            from reinforge.errors import ConfigError

            raise ConfigError(f"local rank {local_rank} of {size} ranks has no GPU of its own: {gpus} visible on this node, "
                              "one per rank needed; start at most that many processes per node (torchrun --nproc_per_node), "
                              "or train on the CPU with trainer.device=cpu")
        torch.cuda.set_device(local_rank)
        backend = "cpu:gloo,cuda:nccl"
    else:
        check_cpu_ranks(size)
    dist.init_process_group(backend=backend, rank=int(os.environ["RANK"]), world_size=size)
    atexit.register(close_distributed)


def close_distributed() -> None:
    """Leave the process group, if this process is in one (a rank still waiting on this one gets an error, not a hang)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    """This process's rank (0 when torch.distributed is not initialised)."""
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    """The number of ranks (1 when torch.distributed is not initialised)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def world_size_of(config: Config) -> int:
    """The data-parallel size a run's config asks for: trainer.nnodes x trainer.n_gpus_per_node (null counts as 1)."""
    return config.trainer.nnodes * (config.trainer.n_gpus_per_node or 1)


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """`values` summed (or `op="max"`/`"min"`) over ranks, as float64 on the CPU (gloo); unchanged with one rank."""
    if world_size() == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return tensor.tolist()


def all_reduce_dict(values: dict[str, float]) -> dict[str, float]:
    """Each value summed over ranks; a key some rank lacks (e.g. a metric of rows only other ranks had) counts 0 there,
    so the ranks always reduce the same list."""
    if world_size() == 1:
        return dict(values)
    names: list = [None] * world_size()
    dist.all_gather_object(names, sorted(values))
    keys = sorted(set().union(*names))
    return dict(zip(keys, all_reduce([values.get(key, 0.0) for key in keys]), strict=True))


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: an FSDP2 shard (DTensor) is gathered from every rank (a collective); a plain tensor is itself."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def gather_rows(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's rows from every rank, concatenated in rank order (for statistics a sum cannot combine:
    max, std, correlation); with one rank the tensors themselves."""
    if world_size() == 1:
        return tensors
    gathered: list = [None] * world_size()
    dist.all_gather_object(gathered, [t.cpu() for t in tensors])
    return [torch.cat([ranks[i] for ranks in gathered]) for i in range(len(tensors))]


def ray_address(config: Config) -> str | None:
    """The Ray cluster to join: RAY_ADDRESS (set by `ray job submit` and by users), else ray_kwargs.ray_init.address;
    None: a run with more than one rank starts its own Ray."""
    return os.environ.get("RAY_ADDRESS") or (config.ray_kwargs.get("ray_init") or {}).get("address")
