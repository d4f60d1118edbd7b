"""One place that builds the generation engine that `actor_rollout_ref.rollout.name` asks for.

`hf` shares the actor's module (nothing to sync). `vllm` and `sglang` load their own copy of the
model from `actor_rollout_ref.model.path` onto the same GPU and are given the actor's weights
(`ModuleWeights`), pushed on their first wake and after every update (docs/engines.md).
"""

from __future__ import annotations

import copy
import importlib.util

import torch

from reinforge.config.schema import Config
from reinforge.errors import ConfigError
from reinforge.inference.colocated import ModuleWeights
from reinforge.inference.engine import InferenceEngine
from reinforge.inference.hf import HFEngine

GPU_ENGINES = ("vllm", "sglang")


def eos_token_ids(generation_config, tokenizer) -> list[int]:
    """The tokens that end a response: the model's generation config's EOS ids (None: no such config), and the tokenizer's."""
    eos = generation_config.eos_token_id if generation_config is not None else None
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def hf_engine_module(model: torch.nn.Module, rollout_dtype: str | None, own_copy: bool = False,
                     computes: torch.dtype | None = None) -> torch.nn.Module:
    """The module the hf engine generates with: the actor's own, or a frozen copy, which `HFEngine.update_weights`
    refreshes after every update. A copy is made when `own_copy` (several ranks: the actor is sharded) or when
    rollout.dtype names another dtype than the actor's weights or than `computes`, the dtype the actor's module computes
    in on CUDA (training/fsdp.py `compute_in`): a bf16 engine beside an fp32 actor, the train/inference mismatch
    algorithm.rollout_correction corrects, decodes from bf16 weights, not under the actor's autocast."""
    from reinforge.training.model import DTYPES

    dtype = None if rollout_dtype is None else DTYPES[rollout_dtype]
    if not own_copy and (dtype is None or dtype == next(model.parameters()).dtype) and computes in (None, dtype):
        return model
    # each parameter cast as it is copied (no second full-precision copy on the way; tied ones stay one), the buffers
    # left in theirs, as a model loaded in that dtype has them (rotary frequencies in bf16 would turn the angles of
    # positions in the thousands by whole radians)
    memo = {} if dtype is None else {id(p): torch.nn.Parameter(p.detach().to(dtype)) for p in model.parameters()}
    replica = copy.deepcopy(model, memo)
    replica.eval()
    replica.requires_grad_(False)
    return replica


def check_gpu_engine(config: Config) -> None:
    """ConfigError when a GPU engine is asked for where it cannot run (also called by config validation)."""
    from reinforge.distributed.process_group import ray_address, world_size_of

    rollout, device = config.actor_rollout_ref.rollout, config.trainer.device
    if rollout.name not in GPU_ENGINES:
        return
    if device != "cuda":
        raise ConfigError(f"actor_rollout_ref.rollout.name={rollout.name} needs a CUDA GPU (trainer.device={device}); "
                          "use actor_rollout_ref.rollout.name=hf on CPU")
    if world_size_of(config) > 1:
        raise ConfigError(f"actor_rollout_ref.rollout.name={rollout.name} with {world_size_of(config)} ranks (trainer.nnodes x "
                          "trainer.n_gpus_per_node) is not supported in this version yet: an in-process engine per rank inside "
                          "the training process group has not been validated; use rollout.name=hf or one GPU")
    if importlib.util.find_spec(rollout.name) is None:
        raise ConfigError(f"actor_rollout_ref.rollout.name={rollout.name} needs the {rollout.name} package: "
                          f"pip install 'reinforge[{rollout.name}]'")
    if not config.actor_rollout_ref.model.path:
        raise ConfigError(f"actor_rollout_ref.rollout.name={rollout.name} loads the model from actor_rollout_ref.model.path, "
                          "which is not set: give a Hugging Face model folder or hub id")
    if ray_address(config) is not None:  # the GPUs are the cluster's, not this driver's
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"actor_rollout_ref.rollout.name={rollout.name} needs a CUDA GPU and this machine has none; "
                          "use actor_rollout_ref.rollout.name=hf on CPU")
    if rollout.tensor_model_parallel_size > torch.cuda.device_count():
        raise ConfigError(f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size} is more "
                          f"than the {torch.cuda.device_count()} GPU(s) visible; set it to at most that (1 on one GPU)")


def make_engine(config: Config, model: torch.nn.Module | None, tokenizer, own_copy: bool = False) -> InferenceEngine:
    """The engine of `rollout.name` for the actor `model`; a vllm/sglang engine already holds `ModuleWeights(model)`,
    an hf engine generates with `model` itself unless `own_copy` or its dtype (rollout.dtype; null: bf16 on CUDA, the
    actor's on the CPU) asks for a copy. Without a `model`
    (reinforge generate), a vllm/sglang engine generates with the weights it loads from model.path itself."""
    rollout, trainer = config.actor_rollout_ref.rollout, config.trainer
    eos = eos_token_ids(model.generation_config if model is not None else _folder_generation_config(config), tokenizer)
    if rollout.name == "hf":
        from reinforge.training import fsdp

        dtype = rollout.dtype or (fsdp.CUDA_COMPUTE_DTYPE if trainer.device == "cuda" else None)  # verl's bf16 on a GPU
        computes = fsdp.compute_dtype(config.actor_rollout_ref.actor.fsdp_config, trainer.device)
        return HFEngine(hf_engine_module(model, dtype, own_copy, computes), tokenizer.pad_token_id, eos, seed=trainer.seed,
                        micro_batch_size=rollout.micro_batch_size_per_gpu)
    check_gpu_engine(config)
    from reinforge.training.model import model_source, policy_tokenizer

    model_cfg = config.actor_rollout_ref.model
    model_path = model_source(model_cfg.path)  # a folder with ~ expanded (the engines would take it for a hub id), or a hub id
    bucket_bytes = rollout.update_weights_bucket_megabytes << 20
    # verl's default context length: the longest prompt the data lets through plus the response (not the model's maximum,
    # whose KV-cache reservation may not fit)
    longest = rollout.max_model_len or config.data.max_prompt_length + rollout.response_length
    tokenizer_path = policy_tokenizer(config)[0]  # the engines' own tokenizer and config, when not in the model folder
    if rollout.name == "vllm":
        from reinforge.inference.vllm_engine import VLLMEngine, vllm_llm_kwargs

        folders = {"hf_config_path": model_cfg.hf_config_path, "tokenizer": tokenizer_path}
        kwargs = vllm_llm_kwargs(rollout, model_path, trainer.seed, model_cfg.trust_remote_code, longest)
        engine = VLLMEngine({**{k: v for k, v in folders.items() if v}, **kwargs}, eos, rollout.free_cache_engine, bucket_bytes)
    else:
        from reinforge.inference.sglang_engine import SGLangEngine, sglang_engine_kwargs

        kwargs = sglang_engine_kwargs(rollout, model_path, trainer.seed, model_cfg.trust_remote_code, longest)
        engine = SGLangEngine({**({"tokenizer_path": tokenizer_path} if tokenizer_path else {}), **kwargs}, eos,
                              rollout.free_cache_engine, bucket_bytes)
    if model is None:
        engine.synced = True  # the weights it loaded (rollout.load_format must name real ones, not dummy)
    else:
        engine.update_weights(ModuleWeights(model))
    return engine


def _folder_generation_config(config: Config):
    """The generation_config.json of model.path (its EOS ids), or None when the folder has none."""
    from transformers import GenerationConfig

    from reinforge.training.model import model_source

    try:
        return GenerationConfig.from_pretrained(model_source(config.actor_rollout_ref.model.path))
    except OSError:
        return None
