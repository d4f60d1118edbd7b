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
- `mixed_precision` (`param_dtype`, `reduce_dtype`): compute in `param_dtype` while the parameters
  stay in `model_dtype`, gradients reduced in `reduce_dtype`. On CUDA only, where an empty setting
  means verl's default, bf16 compute and fp32 reduction; `param_dtype: fp32` computes in fp32. With
  one rank there is nothing to shard: the model's forward runs under `torch.autocast` to
  `param_dtype` instead (`compute_in`).
- `reshard_after_forward`: free gathered layers after the forward (else keep them for the backward).
"""

from __future__ import annotations

import functools
import types
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


# verl's on CUDA: the compute dtype of the trained models when mixed_precision.param_dtype is unset, and the hf engine's
# when rollout.dtype is (tests/conftest.py makes it fp32 on a GPU: the suite's expected numbers are fp32 ones)
CUDA_COMPUTE_DTYPE = "bf16"


def compute_dtype(fsdp_config: FSDPConfig, device: str) -> torch.dtype | None:
    """The dtype a role's forward computes in: on CUDA `mixed_precision.param_dtype`, bf16 when unset (verl's default,
    also when `mixed_precision` is empty); None on the CPU, where it computes in `model_dtype`."""
    if device != "cuda":
        return None
    return DTYPES[(fsdp_config.mixed_precision or {}).get("param_dtype", CUDA_COMPUTE_DTYPE)]


def mixed_precision_policy(fsdp_config: FSDPConfig, device: str) -> MixedPrecisionPolicy:
    """`fsdp_config.mixed_precision` (checked by config/validate.py) as FSDP2's policy, with verl's defaults on CUDA (bf16
    compute, fp32 gradient reduction); empty on the CPU."""
    if device != "cuda":
        return MixedPrecisionPolicy()
    reduce = (fsdp_config.mixed_precision or {}).get("reduce_dtype", "fp32")
    return MixedPrecisionPolicy(param_dtype=compute_dtype(fsdp_config, device), reduce_dtype=DTYPES[reduce])


def compute_in(model: torch.nn.Module, fsdp_config: FSDPConfig, device: str) -> None:
    """An unsharded `model` computes in `compute_dtype`: on CUDA, when its parameters are in another dtype, its forward
    (an attribute of this instance, so its state dict and class stay as they are) runs under `torch.autocast` to that
    dtype: matrix products in it, the parameters and gradients in their own dtype. Nothing on the CPU."""
    dtype = compute_dtype(fsdp_config, device)
    if dtype is None or dtype == next(model.parameters()).dtype:
        return
    forward = type(model).forward

    @functools.wraps(forward)  # its signature too (inference/hf.py reads the KV cache's keyword from it)
    def cast_forward(self, *args, **kwargs):
        with torch.autocast("cuda", dtype=dtype):
            return forward(self, *args, **kwargs)

    model.forward = types.MethodType(cast_forward, model)  # bound: a deep copy of the model binds its own copy


def shard_model(model: torch.nn.Module, fsdp_config: FSDPConfig, device: str) -> torch.nn.Module:
    """`model` (already on `device`) wrapped with FSDP2 over all ranks, per decoder layer, then the root; on one rank
    `model` itself, computing in `compute_dtype` on CUDA (under autocast when its parameters are in another dtype)."""
    if world_size() == 1:
        compute_in(model, fsdp_config, device)
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
