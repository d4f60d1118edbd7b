"""The training engine's sections that every role with a model shares (actor, reference, critic, reward model,
`reinforge sft`): the optimizer (`optim.*`) and FSDP (`fsdp_config.*`); keys, defaults and meanings as in verl's
`optim/fsdp.yaml` and `engine/fsdp.yaml` (config/schema.py holds the root)."""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.config.fields import Node, _f

SP_DOC = ("verl's Ulysses sequence parallelism (split each sequence over this many GPUs to save memory); accepted, any "
          "value >= 1: sequences are not split in this version, every rank computes whole sequences (the same maths).")


@dataclass
class OptimConfig(Node):
    lr: float = _f(1e-6, "Peak learning rate of AdamW.")
    lr_warmup_steps: int = _f(-1, "Linear warmup steps; 0 or negative: use lr_warmup_steps_ratio.")
    lr_warmup_steps_ratio: float = _f(0.0, "Warmup as a fraction of total training steps (used when lr_warmup_steps <= 0).")
    lr_scheduler_type: str = _f("constant", "Learning-rate schedule after warmup: constant, cosine, wsd (warmup-stable-decay: constant, then the cosine over the last 10% of the steps after warmup), or linear (down to min_lr_ratio, as transformers' and TRL's down to 0; not in verl).")
    warmup_style: str | None = _f(None, "Older verl name of lr_scheduler_type; when set it wins.")
    min_lr_ratio: float = _f(0.0, "Cosine (and linear) schedule floor as a fraction of lr.")
    num_cycles: float = _f(0.5, "Cosine cycles over training (0.5: a half cosine down to min_lr).")
    total_training_steps: int = _f(-1, "Steps the schedule spans: filled in by the trainer with the run's steps, as verl does.")
    weight_decay: float = _f(0.01, "AdamW weight decay.")
    betas: list = _f([0.9, 0.999], "AdamW betas.")
    eps: float = _f(1e-8, "Epsilon of AdamW (and of the optimizer class named, where it takes one; at 1e-8 another class keeps its own default).")
    clip_grad: float | None = _f(None, "Gradient-norm clip; when set it overrides actor.grad_clip (verl's newer name).")
    optimizer: str = _f("AdamW", "Optimizer class, looked up in optimizer_impl (AdamW, Adam, SGD, ... or another module's "
                                 "class); built with lr, weight_decay, betas and eps where it takes them.")
    optimizer_impl: str = _f("torch.optim", "Module holding the optimizer class (torch.optim, torchao.optim, bitsandbytes.optim).")
    override_optimizer_config: dict | None = _f({}, "More keyword arguments for the optimizer, e.g. {amsgrad: true}; they "
                                                      "win over the ones above.")
    lr_wsd_stable_steps_ratio: float = _f(0.9, "wsd schedule: the constant part, as a fraction of the steps after "
                                          "warmup (verl's); only 0.9 in this version, another value is an error.")
    zero_indexed_step: bool = _f(True, "The cosine schedule counts steps from 0 (the first warmup step has lr 0); false "
                                       "counts from 1 (torchtitan's), a step ahead. Read by the cosine schedule only, as in "
                                       "verl.")


@dataclass
class FSDPConfig(Node):
    param_offload: bool = _f(False, "FSDP2 (more than one rank, CUDA): keep sharded parameters, gradients and the optimizer step on the CPU (CPUOffloadPolicy). No effect on CPU.")
    optimizer_offload: bool = _f(False, "FSDP2 (more than one rank, CUDA): keep the optimizer state in CPU memory between updates. No effect on CPU.")
    offload_policy: bool = _f(False, "FSDP2 CPUOffloadPolicy; the same as param_offload here.")
    reshard_after_forward: bool = _f(True, "FSDP2 (more than one rank): free each gathered layer after its forward (gather again for the backward); false keeps it, more memory, less communication.")
    fsdp_size: int = _f(-1, "FSDP shard group size; this version shards over all ranks (-1).")
    wrap_policy: dict = _f({}, "FSDP wrap policy; this version wraps every decoder layer (the model's _no_split_modules).")
    mixed_precision: dict = _f({}, "CUDA mixed precision, verl's keys: param_dtype (compute dtype), reduce_dtype (gradient reduction over ranks), buffer_dtype (accepted; buffers keep model_dtype). Unset keys and empty: verl's default, bf16 compute and fp32 reduction; param_dtype: fp32 computes in fp32. One rank: the forward runs under torch.autocast to param_dtype. On the CPU the model computes in model_dtype.")
    model_dtype: str = _f("fp32", "Parameter dtype of the model: fp32 or bf16 (float32/bfloat16 also accepted).")
    forward_prefetch: bool = _f(False, "Accepted for verl compatibility (prefetch the next layer's parameters in the "
                                       "forward pass); FSDP2's own prefetching is used here.")
    strategy: str = _f("fsdp", "Accepted for verl compatibility (verl's engine config: fsdp or fsdp2); the role's own "
                               "strategy key decides, and both mean FSDP2 here.")
    use_orig_params: bool = _f(False, "Accepted for verl compatibility (FSDP1's use_orig_params); no effect here (FSDP2).")
    ulysses_sequence_parallel_size: int = _f(1, SP_DOC)
    entropy_from_logits_with_chunking: bool = _f(False, "Accepted for verl compatibility (verl's engine config); no effect here.")
    use_torch_compile: bool = _f(True, "Accepted for verl compatibility (verl's engine config); no torch.compile in this version.")
    entropy_checkpointing: bool = _f(False, "Accepted for verl compatibility (verl's engine config); no effect here.")
    forward_only: bool = _f(False, "Accepted for verl compatibility (verl's engine config: a model without an optimizer); "
                                   "whether a role trains follows from the role here.")
    seed: int = _f(42, "Accepted for verl compatibility (verl's engine config: the seed of the engine's ranks); model-side "
                       "randomness is seeded by trainer.seed here.")
    full_determinism: bool = _f(False, "Accepted for verl compatibility (verl's engine config: deterministic CUDA kernels); no "
                                       "effect here.")
    entropy_from_logits_chunk_size: int = _f(2048, "Accepted for verl compatibility (chunk size of "
                                             "entropy_from_logits_with_chunking); no effect here.")
    use_no_sync_for_gradient_accumulation: bool = _f(True, "Accepted for verl compatibility (skip the gradient reduction "
                                                     "of all but the last micro-batch); no effect here.")
    pad_to_length: bool = _f(False, "Accepted for verl compatibility (pad packed micro-batches to a bucketed length, for "
                                    "static shapes); no effect here.")
    pad_to_length_bucket: int = _f(1024, "Accepted for verl compatibility (the bucket of pad_to_length); no effect here.")
    dtype: str = _f("bfloat16", "Accepted for verl compatibility (verl's engine config: the compute dtype of its new engine "
                                "workers); model_dtype and mixed_precision decide here.")
    qat: dict = _f({}, "verl's quantization-aware training of the engine (enable, mode, group_size, ...); a free-form mapping, "
                       "only enable=false in this version (enable=true is an error).")
    turbo_config: dict = _f({}, "Accepted for verl compatibility (verl's FSDP-turbo parallel plan: distributed.*); a "
                                "free-form mapping, no effect here.")
    per_layer_optimizer_step: bool = _f(False, "Accepted for verl compatibility (with offloaded optimizer state, stream it "
                                        "to the GPU layer by layer for the step); no effect here.")
    optimizer_step_prefetch_layers: int = _f(1, "Accepted for verl compatibility (layers prefetched by "
                                             "per_layer_optimizer_step); no effect here.")
    offload: dict = _f({}, "Accepted for verl compatibility (where state is offloaded: param.target, optimizer.target: none, "
                           "cpu or disk; disk.path, chunk_size_mb, cleanup_on_exit), a free-form mapping; no effect here "
                           "(param_offload and optimizer_offload act).")
