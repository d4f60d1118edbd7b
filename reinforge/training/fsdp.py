"""FSDP2 sharding of the trained, reference and value models when a role runs on more than one rank.

Each decoder layer (the classes a Hugging Face model lists in `_no_split_modules`, else the
modules of `model.model.layers`) becomes its own `fully_shard` unit, then the root: a layer's
parameters are gathered just before it runs and freed after, so no rank holds the whole model
at once. Gradients are reduce-scattered as an average over ranks, which is why `agg_loss`
multiplies each rank's loss by `dp_size` (the global loss normalisation then makes the summed
gradient equal the single-process one).

`fsdp_config` keys (verl's names):
- `param_offload` / `offload_policy`: FSDP2's CPUOffloadPolicy (sharded parameters, gradients
  and, with them, the optimizer step live in CPU memory; CUDA only: on CPU they are already there).
- `optimizer_offload`: the optimizer state is moved to CPU memory between updates (CUDA only).
- `mixed_precision` (`param_dtype`, `reduce_dtype`): compute in `param_dtype` (bf16) while the
  sharded parameters stay in `model_dtype`, gradients reduced in `reduce_dtype` (fp32). Only on
  CUDA and only when set.
- `reshard_after_forward`: free gathered layers after the forward (else keep them for the backward).
"""

from __future__ import annotations

import warnings

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from reinforge.config.engine_schema import FSDPConfig
from reinforge.distributed.process_group import world_size
from reinforge.errors import ConfigError
from reinforge.training.model import DTYPES


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of `model`: modules whose class is named in a `_no_split_modules` of the model (or
    of a Hugging Face model inside it, as in a value head wrapper), else `model.model.layers`."""
    names = {name for module in model.modules() for name in (getattr(module, "_no_split_modules", None) or [])}
    layers = [module for module in model.modules() if type(module).__name__ in names]
    if not layers:
        layers = list(getattr(getattr(model, "model", None), "layers", []) or [])
    if not layers:
        raise ConfigError(f"cannot shard {type(model).__name__} with FSDP: it names no _no_split_modules and has no "
                          "model.layers; train it on one rank (trainer.n_gpus_per_node=1)")
    return layers


def mixed_precision_policy(fsdp_config: FSDPConfig, device: str) -> MixedPrecisionPolicy:
    """`fsdp_config.mixed_precision` (checked by config/validate.py) as FSDP2's policy; empty when unset or on CPU."""
    settings = fsdp_config.mixed_precision
    if not settings or device != "cuda":
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=DTYPES[settings.get("param_dtype", "bf16")],
                                reduce_dtype=DTYPES[settings.get("reduce_dtype", "fp32")])


def shard_model(model: torch.nn.Module, fsdp_config: FSDPConfig, device: str) -> torch.nn.Module:
    """`model` (already on `device`) wrapped with FSDP2 over all ranks, per decoder layer, then the root; on one rank
    `model` itself, untouched."""
    if world_size() == 1:
        return model
    # FSDP2 warns at every forward whose output is a view (a value model's logits are), in case the caller changes it in
    # place, which would skip the all-gather of the backward; reinforge never does (tests/distributed compares 2 ranks'
    # gradients with 1 process's), so the warning would only repeat, twice per step and rank
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor", category=UserWarning)
    mesh = init_device_mesh(device, (world_size(),))
    offload = CPUOffloadPolicy() if device == "cuda" and (fsdp_config.param_offload or fsdp_config.offload_policy) else OffloadPolicy()
    options = {"mesh": mesh, "reshard_after_forward": fsdp_config.reshard_after_forward,
               "mp_policy": mixed_precision_policy(fsdp_config, device), "offload_policy": offload}
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return model


def offload_optimizer(optimizer: torch.optim.Optimizer, fsdp_config: FSDPConfig, device: str) -> None:
    """With `optimizer_offload` on a sharded CUDA run, every tensor of the optimizer's state to `device`: the
    CPU between updates, the GPU for an update. Nothing otherwise (with CPUOffloadPolicy the state is already on the CPU)."""
    offloads_params = fsdp_config.param_offload or fsdp_config.offload_policy
    on_cuda = optimizer.param_groups[0]["params"][0].device.type == "cuda"
    if not fsdp_config.optimizer_offload or offloads_params or world_size() == 1 or not on_cuda:
        return
    for state in optimizer.state.values():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                state[name] = value.to(device)
