"""Settings a user gave that have no effect in this run, reported once at start (not ignored silently)."""

from __future__ import annotations

from reinforge.config.derived import step_batch
from reinforge.config.fields import node_at
from reinforge.config.schema import ATTENTION_KEYS, Config
from reinforge.config.section_checks import CHECKPOINT_ENGINE_BUCKET, NOT_SUPPORTED, lora_enabled
from reinforge.config.unused_algorithm import algorithm_reason, distillation_reason, lone_groups, rollout_correction_reason

_ENGINE_ONLY = (
    "gpu_memory_utilization", "tensor_model_parallel_size", "max_num_batched_tokens", "max_model_len",
    "max_num_seqs", "enforce_eager", "free_cache_engine", "load_format", "enable_chunked_prefill",
    "disable_log_stats", "engine_kwargs", "update_weights_bucket_megabytes", "cudagraph_capture_sizes",
    "expert_parallel_size", "skip_tokenizer_init", "multi_stage_wake_up", "pipeline_model_parallel_size",
    "scheduling_policy", "quantization", "quantization_config_file",
)
_NOT_PASSED_TO_ENGINE = {  # vLLM/SGLang settings that this version does not hand to the engine
    "cudagraph_capture_sizes": "not passed to the engine, which keeps its own CUDA-graph batch sizes; set them in "
                               "engine_kwargs.vllm (engine_kwargs.sglang.cuda_graph_bs)",
    "expert_parallel_size": "not passed to the engine; set engine_kwargs.vllm.enable_expert_parallel (engine_kwargs.sglang.ep_size)",
    "skip_tokenizer_init": "not passed to the engine, which is given token ids and returns token ids either way",
    "multi_stage_wake_up": "the engine takes back its memory in one step before generating",
    "pipeline_model_parallel_size": "not passed to the engine; set it in engine_kwargs.vllm (engine_kwargs.sglang.pp_size)",
    "scheduling_policy": "not passed to the engine, which schedules first come, first served",
    "quantization": "not passed to the engine; set engine_kwargs.vllm.quantization (engine_kwargs.sglang.quantization)",
    "quantization_config_file": "not passed to the engine; set it in engine_kwargs.vllm (engine_kwargs.sglang)",
}
SP_REASON = "sequences are not split across ranks in this version: each rank computes whole sequences"
PROFILER_REASON = "no profiler integration in this version; the timing_s/* metrics give each phase's seconds per step"
NO_REF_REASON = ("no reference model in this run (it is used by actor_rollout_ref.actor.use_kl_loss or "
                 "algorithm.use_kl_in_reward)")

_SCHEDULE_LENGTH = ("the learning-rate schedule spans the run's training steps (trainer.total_training_steps, or "
                    "trainer.total_epochs of the data), which the trainer fills in here whatever it says, as verl's does")
_ALWAYS_INERT = {
    "actor_rollout_ref.actor.optim.total_training_steps": _SCHEDULE_LENGTH,
    "critic.optim.total_training_steps": _SCHEDULE_LENGTH,
    "actor_rollout_ref.model.use_shm": "the model is read from its folder",
    "actor_rollout_ref.actor.use_torch_compile": "no torch.compile in this version",
    "actor_rollout_ref.hybrid_engine": "actor, rollout and reference always share one worker",
    "actor_rollout_ref.rollout.agent.num_workers": "every row's agent loop runs in one asyncio event loop of the rollout worker",
    "actor_rollout_ref.rollout.agent.custom_async_server": "generation runs on the engine of actor_rollout_ref.rollout.name; "
                                                           "there is no async server to replace",
    "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": "token-in/token-out: the trained ids are the model's own "
                                                                        "tokens, as verl's default (false) has them",
    "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode": "model turns keep the engine's token ids and only added "
                                                                           "messages are tokenized: no re-tokenization to check",
    "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts": "verl's SGLang rollout setting; actor_rollout_ref.rollout.n sets the "
                                                                "conversations per prompt",
    "data.return_raw_input_ids": "prompts are tokenized once by the model's tokenizer",
    "trainer.default_hdfs_dir": "no HDFS copy",
    "critic.model.tokenizer_path": "the critic reads the actor's token ids",
    "trainer.del_local_ckpt_after_load": "checkpoints are kept after resuming",
    "actor_rollout_ref.rollout.calculate_log_probs": "every engine always returns rollout_log_probs",
    "actor_rollout_ref.rollout.prompt_length": "prompts are limited by data.max_prompt_length",
    "reward_model.model.use_shm": "the model is read from its folder",
    "actor_rollout_ref.model.use_fused_kernels": "no fused kernels in this version: log-probs and entropy come from the logits",
    "actor_rollout_ref.model.use_liger": "no Liger kernels in this version",
    "actor_rollout_ref.model.enable_activation_offload": "activations stay on the device (enable_gradient_checkpointing saves their memory)",
    "critic.model.enable_activation_offload": "activations stay on the device (enable_gradient_checkpointing saves their memory)",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": "the entropy is computed from each micro-batch's logits at once",
    "actor_rollout_ref.actor.entropy_checkpointing": "the entropy is not recomputed in the backward pass in this version",
    "actor_rollout_ref.actor.sum_pi_squared_checkpointing": "sum_pi_squared is computed without gradients, in the old-log-prob pass",
    "actor_rollout_ref.actor.checkpoint.async_save": "checkpoints are saved before the next step starts",
    "critic.checkpoint.async_save": "checkpoints are saved before the next step starts",
    "actor_rollout_ref.rollout.enable_prefix_caching": "not passed to the engine: vLLM and SGLang keep their own default (on); "
                                                       "set it with engine_kwargs.vllm.enable_prefix_caching "
                                                       "(engine_kwargs.sglang.disable_radix_cache)",
    "actor_rollout_ref.nccl_timeout": "collectives use torch.distributed's default timeout; trainer.hang_dump_s reports calls that hang",
    "data.filter_overlong_prompts_workers": "prompts are measured in-process",
    "data.use_shm": "the data files are read from their paths",
    "trainer.use_legacy_worker_impl": "reinforge has one worker implementation",
    "trainer.ray_wait_register_center_timeout": "no register center: Ray workers start in placement groups",
    "critic.rollout_n": "the critic's mini-batches always hold ppo_mini_batch_size x actor_rollout_ref.rollout.n trajectories",
    "actor_rollout_ref.rollout.layered_summon": "an engine with its own weights always gets them in buckets "
                                                "(rollout.update_weights_bucket_megabytes), LoRA adapters merged",
    "actor_rollout_ref.actor.use_fused_kernels": "no fused kernels in this version: log-probs and entropy come from the logits",
    "actor_rollout_ref.actor.use_remove_padding": "verl's copy of actor_rollout_ref.model.use_remove_padding, which decides",
    "actor_rollout_ref.model.fused_kernel_options": "no fused kernels in this version",
    "reward_model.model.use_fused_kernels": "no fused kernels in this version",
    "critic.model.use_shm": "the model is read from its folder",
    "actor_rollout_ref.ref.use_torch_compile": "no torch.compile in this version",
    "actor_rollout_ref.ref.entropy_from_logits_with_chunking": "the reference pass computes log-probs, not the entropy",
    "actor_rollout_ref.ref.entropy_checkpointing": "the reference pass computes log-probs, not the entropy",
    "data.return_multi_modal_inputs": "a row's processed images always travel with it here",
    "trainer.esi_redundant_time": "no Elastic Server Instance handling; checkpoints follow trainer.save_freq, and a SIGTERM "
                                  "saves one (trainer.save_on_stop)",
    "reward_model.enable_resource_pool": "the reward model runs on the training ranks' GPUs; there is no pool of its own",
    "reward_model.n_gpus_per_node": "the reward model runs on the training ranks' GPUs; there is no pool of its own",
    "reward_model.nnodes": "the reward model runs on the training ranks' GPUs; there is no pool of its own",
    "actor_rollout_ref.rollout.trace": "no rollout tracing in this version; rollouts are kept in the run folder's rollouts/ "
                                       "(all of them with trainer.rollout_data_dir)",
    "actor_rollout_ref.rollout.data_parallel_size": "generation runs on the training ranks, one engine each; it has no "
                                                    "data-parallel size of its own",
    "global_profiler": PROFILER_REASON,
    **dict.fromkeys(("trainer.profile_steps", "trainer.controller_nsight_options", "trainer.worker_nsight_options"),
                    PROFILER_REASON),
    **dict.fromkeys(("actor_rollout_ref.actor.entropy_from_logits_chunk_size", "actor_rollout_ref.ref.entropy_from_logits_chunk_size"),
                    "the entropy is computed from each micro-batch's logits at once"),
    **dict.fromkeys(("actor_rollout_ref.actor.pad_to_length", "actor_rollout_ref.ref.pad_to_length"),
                    "padded micro-batches are trimmed to the columns their rows use; no packing to pad"),
    **dict.fromkeys(("actor_rollout_ref.actor.data_loader_seed", "critic.data_loader_seed"),
                    "mini-batch shuffling is seeded by trainer.seed"),
    "actor_rollout_ref.actor.calculate_entropy": "the entropy is computed when actor.entropy_coeff uses it",
    "actor_rollout_ref.actor.use_prefix_grouper": "actor_rollout_ref.model.share_prompt_forward computes a repeated prompt once",
    "actor_rollout_ref.actor.checkpoint.strict": "resuming always loads every key of the checkpoint",
    "critic.checkpoint.strict": "resuming always loads every key of the checkpoint",
    "actor_rollout_ref.model.tiled_mlp": "the MLP is computed over the whole sequence (enable_gradient_checkpointing saves memory)",
    "actor_rollout_ref.model.mtp": "no multi-token prediction or speculative decoding in this version",
    "data.image_patch_size": "the model's image processor resizes images here, with its own patch size",
    "data.audio_key": "rows with audio are not read in this version",
    "data.tool_config_path": "the rollout's tools come from actor_rollout_ref.rollout.multi_turn.tool_config_path (this "
                             "key's tools only measure prompts for data.filter_overlong_prompts)",
    "data.function_tool_path": "the rollout's function tools come from actor_rollout_ref.rollout.multi_turn.function_tool_path "
                               "(this key's tools only measure prompts for data.filter_overlong_prompts)",
    "actor_rollout_ref.rollout.nnodes": "generation runs on the training ranks; there is no rollout pool of its own",
    "actor_rollout_ref.rollout.router_config_path": "the engine runs in the training process: no inference servers to route "
                                                    "requests among",
    "actor_rollout_ref.rollout.n_gpus_per_node": "generation runs on the training ranks; there is no rollout pool of its own",
    "actor_rollout_ref.rollout.seed": "every rollout row samples with its own seed derived from trainer.seed, the step and the row",
    "actor_rollout_ref.rollout.full_determinism": "no deterministic-kernel mode of the engines in this version",
    "actor_rollout_ref.rollout.checkpoint_engine": "weights reach the engine in buckets of rollout.update_weights_bucket_megabytes "
                                                   "(which checkpoint_engine.update_weights_bucket_megabytes sets)",
    "actor_rollout_ref.rollout.moe_load_balance_metrics_interval": "no MoE load-balance metrics of the engine in this version",
    "actor_rollout_ref.rollout.prometheus": "no Prometheus export in this version; metrics go to trainer.logger",
    "actor_rollout_ref.rollout.cast_to_rollout_dtype": "the engine gets its weights in its own dtype",
    "actor_rollout_ref.rollout.mtp": "no speculative decoding in this version",
    "actor_rollout_ref.rollout.qat": "quantization-aware training is not in this version",
    "actor_rollout_ref.rollout.disaggregation": "no prefill/decode disaggregation in this version",
    **dict.fromkeys(("actor_rollout_ref.actor.truncate_padding", "actor_rollout_ref.model.truncate_padding",
                     "critic.model.truncate_padding"), "padded micro-batches are trimmed to the columns their rows use"),
    **dict.fromkeys(("actor_rollout_ref.model.lora", "critic.model.lora"),
                    "verl's LoRA settings of its Megatron backend (and lora.merge, which verl's FSDP engine reads: "
                    "reinforge always gives engines the merged weights, as lora.merge=true); LoRA here is the section's "
                    "lora_rank, lora_alpha and target_modules"),
    "actor_rollout_ref.rollout.use_preprocessed_multimodal_input": "the hf engine always takes processed images",
    "critic.model.custom_chat_template": "the critic reads the actor's token ids",
    "critic.model.use_liger": "no Liger kernels in this version",
    **dict.fromkeys(("critic.model.use_fused_kernels", "critic.model.fused_kernel_options"), "no fused kernels in this version"),
    "critic.model.tiled_mlp": "the MLP is computed over the whole sequence (enable_gradient_checkpointing saves memory)",
    "critic.model.mtp": "no multi-token prediction in this version",
    "reward_model.num_workers": "rewards are scored by the trainer; reward_model.reward_kwargs sets the parallelism "
                                "(max_concurrency, num_processes), and reward.num_workers the remote manager's processes",
    "reward_model.use_reward_loop": "reinforge has one reward implementation",
    **dict.fromkeys(("reward_model.rollout", "reward_model.inference", "reward.reward_model.rollout"),
                    "the reward model runs in the training process, not on an inference server (reward_model.judge.* "
                    "sets a generative judge)"),
    **dict.fromkeys(("reward.reward_model.enable_resource_pool", "reward.reward_model.n_gpus_per_node",
                     "reward.reward_model.nnodes"), "the reward model runs on the training ranks' GPUs; there is no pool of its own"),
    "algorithm.filter_groups.max_inflight_gen_batches": "generation batches are drawn one at a time",
    "trainer.balance_keep_minibatch": "trainer.balance_batch always keeps each mini-batch's rows, each rank getting its "
                                      "share of each",
    "trainer.checkpoint_callback_class": "no checkpoint callbacks in this version",
    "trainer.use_v1": "reinforge has one trainer, synchronous as verl's sync mode",
    "trainer.v1": "reinforge's trainer is synchronous (verl's trainer_mode=sync); the other keys act in verl's asynchronous "
                  "modes only",
    "transfer_queue": "no TransferQueue in this version: batches go from the driver to the Ray workers directly",
    **dict.fromkeys(("skip.rollout_tq", "skip.async_rollout"),
                    "verl's TransferQueue and fully asynchronous trainers' rollout skip; this version has neither "
                    "(actor_rollout_ref.rollout.skip.* is the trainer's)"),
    "skip.rollout": "reinforge's rollout skip is actor_rollout_ref.rollout.skip.* (skip.rollout.enable=true is an error)",
}
_NEWER_PLACES = {key: f"at verl's default; not in this version: {what}" for key, _, what in NOT_SUPPORTED}
_NEWER_PLACES.update({"reward.reward_manager.module.name": "read only with reward.reward_manager.source=module, which is not "
                                                           "in this version",
                      "reward_manager.module.name": "read only with reward_manager.source=module, which is not in this version"})
_LORA_SETTINGS = ("lora_alpha", "target_modules", "exclude_modules")


def _lora_reason(config: Config, key: str) -> str | None:
    """Why a LoRA setting of the actor's or the critic's model (or checkpoint.save_lora_only) does nothing, if it does not."""
    section, _, name = key.rpartition(".")
    if name == "save_lora_only" and section in ("actor_rollout_ref.actor.checkpoint", "critic.checkpoint"):
        model = "critic.model" if section == "critic.checkpoint" else "actor_rollout_ref.model"
        return None if lora_enabled(node_at(config, model)) else f"no LoRA adapters in this run ({model}.lora_rank=0)"
    if section not in ("actor_rollout_ref.model", "critic.model") or name not in (*_LORA_SETTINGS, "lora_rank"):
        return None
    model_cfg = node_at(config, section)
    if name != "lora_rank" and not lora_enabled(model_cfg):
        return f"LoRA is off ({section}.lora_rank=0)"
    if model_cfg.get("lora_adapter_path"):
        return f"{section}.lora_adapter_path is set: the adapter's own adapter_config.json gives its rank, scale and layers"
    return None

HYDRA_REASON = "Hydra's own setting (its outputs and logs); it changes no config key, and reinforge does not run through Hydra"


_CRITIC_KEYS = ("trainer.critic_warmup", "trainer.max_critic_ckpt_to_keep")
_REWARD_MODEL_KEYS = ("model", "judge", "micro_batch_size", "micro_batch_size_per_gpu", "max_length", "strategy",
                      "use_dynamic_bsz", "forward_max_token_len_per_gpu")


def _reward_model_reason(config: Config, key: str) -> str | None:
    """Why a reward_model.* key does nothing in this run, if it does not."""
    parts, rm = key.split("."), config.reward_model
    if parts[0] != "reward_model" or len(parts) < 2:
        return None
    if parts[1] in _REWARD_MODEL_KEYS and not rm.enable:
        return "no reward model in this run (reward_model.enable=true adds one)"
    if parts[1] in ("use_dynamic_bsz", "forward_max_token_len_per_gpu") and rm.judge.enable:
        return "the judge generates in reward_model.micro_batch_size_per_gpu batches; token budgets are for the sequence classifier"
    if parts[1] == "judge" and parts[-1] != "enable" and not rm.judge.enable:
        return "used by a generative judge only (reward_model.judge.enable=true)"
    if parts[1] == "sandbox_fusion" and config.custom_reward_function.path:
        return "a custom reward function gets no sandbox arguments; only the built-in code scorers use Sandbox Fusion"
    if parts[1] == "sandbox_fusion" and parts[-1] != "url" and not rm.sandbox_fusion.url:
        return "used only with reward_model.sandbox_fusion.url; without it code runs in the local sandbox"
    if parts[1] in ("reward_manager", "reward_kwargs") and rm.enable and not config.custom_reward_function.path:
        return "the reward model's score is the whole reward when no custom_reward_function.path is set"
    return None


_TOKEN_BUDGETS = {  # section: (its switch, its token budgets, the row counts the switch replaces)
    "actor_rollout_ref.actor": ("use_dynamic_bsz", ("ppo_max_token_len_per_gpu",),
                                ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")),
    "actor_rollout_ref.rollout": ("log_prob_use_dynamic_bsz", ("log_prob_max_token_len_per_gpu",),
                                  ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")),
    "actor_rollout_ref.ref": ("log_prob_use_dynamic_bsz", ("log_prob_max_token_len_per_gpu",),
                              ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")),
    "critic": ("use_dynamic_bsz", ("ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu"),
               ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "forward_micro_batch_size",
                "forward_micro_batch_size_per_gpu")),
    "reward_model": ("use_dynamic_bsz", ("forward_max_token_len_per_gpu",), ("micro_batch_size", "micro_batch_size_per_gpu")),
}


def _token_budget_reason(config: Config, key: str) -> str | None:
    """Why a token budget (its switch off) or a micro-batch row count (its switch on) does nothing, if it does not."""
    section, _, name = key.rpartition(".")
    if section not in _TOKEN_BUDGETS:
        return None
    switch, budgets, row_counts = _TOKEN_BUDGETS[section]
    node = node_at(config, section)
    if name in budgets and not getattr(node, switch):
        return f"a token budget acts only with {section}.{switch}=true"
    judge = section == "reward_model" and config.reward_model.judge.enable
    if name in row_counts and getattr(node, switch) and not judge:
        return f"{section}.{switch}=true forms micro-batches by token budget instead"
    return None


_CUDA_ONLY_FSDP = ("param_offload", "optimizer_offload", "offload_policy", "mixed_precision")
_VERL_ENGINE_FSDP = {  # keys of verl's engine config (engine/fsdp.yaml) that mean nothing for FSDP2 here
    "strategy": "the role's own strategy key decides (fsdp and fsdp2 both mean FSDP2 here)",
    "use_orig_params": "FSDP1's setting; this version uses FSDP2",
    "entropy_from_logits_with_chunking": "the entropy is computed from each micro-batch's logits at once",
    "use_torch_compile": "no torch.compile in this version",
    "entropy_checkpointing": "the entropy is not recomputed in the backward pass in this version",
    "forward_only": "whether a model trains follows from its role",
    **dict.fromkeys(("per_layer_optimizer_step", "optimizer_step_prefetch_layers"),
                    "the optimizer step runs where its state is kept (optimizer_offload keeps it in CPU memory)"),
    "offload": "param_offload and optimizer_offload decide what is offloaded in this version",
    "seed": "model-side randomness is seeded by trainer.seed",
    "full_determinism": "no deterministic-kernel mode in this version",
    "entropy_from_logits_chunk_size": "the entropy is computed from each micro-batch's logits at once",
    "use_no_sync_for_gradient_accumulation": "FSDP2 reduces gradients as it does in this version",
    "pad_to_length": "padded micro-batches are trimmed to the columns their rows use; no packing to pad",
    "pad_to_length_bucket": "padded micro-batches are trimmed to the columns their rows use; no packing to pad",
    "dtype": "model_dtype and mixed_precision set the dtypes here",
    "qat": "quantization-aware training is not in this version",
    "turbo_config": "FSDP2 shards over all ranks with one unit per decoder layer in this version",
}


def _fsdp_reason(config: Config, section: str, setting: str) -> str | None:
    """Why `<section>...fsdp_config.<setting>` does nothing in this run, if it does not."""
    from reinforge.distributed.process_group import world_size_of

    if setting == "model_dtype":
        return None
    if setting in _VERL_ENGINE_FSDP:
        return _VERL_ENGINE_FSDP[setting]
    if setting == "forward_prefetch":
        return "FSDP2's own prefetching is used in this version"
    if setting in ("fsdp_size", "wrap_policy"):
        return "FSDP2 shards over all ranks with one unit per decoder layer in this version"
    if section == "reward_model":
        return "the reward model is not sharded in this version"
    if config.trainer.device == "cpu" and setting == "mixed_precision":
        return "acts on CUDA only; on the CPU the model computes in model_dtype"
    if world_size_of(config) == 1 and setting != "mixed_precision":
        return "one data-parallel rank: the model is a plain module, not sharded (more ranks: trainer.n_gpus_per_node)"
    if config.trainer.device == "cpu" and setting in _CUDA_ONLY_FSDP:
        return "acts on CUDA only; on the CPU parameters and optimizer state are already in CPU memory, in model_dtype"
    return None


def _attention_reason(name: str) -> str | None:
    from reinforge.training.model import attention_here

    here = attention_here(name)
    return None if here == name else f"flash attention needs a CUDA GPU; on this machine the model attends with {here} (the same maths)"


def uses_reference(config: Config) -> bool:
    """Whether the run loads a reference model (trainer/main.py gives the workers the actor_rollout_ref role then)."""
    return config.actor_rollout_ref.actor.use_kl_loss or config.algorithm.use_kl_in_reward


def _uses_ray(config: Config) -> bool:
    from reinforge.distributed.process_group import ray_address, world_size_of

    return world_size_of(config) > 1 or ray_address(config) is not None


def unused_settings(config: Config, user_keys: list[str]) -> list[str]:
    """One line per user-set key that does nothing in this run, with the reason."""
    from reinforge.algorithm import needs_critic
    from reinforge.distributed.process_group import world_size_of

    rollout = config.actor_rollout_ref.rollout
    lines = []
    for key in dict.fromkeys(user_keys):
        reason = next((r for prefix, r in _ALWAYS_INERT.items() if key == prefix or key.startswith(prefix + ".")), None)
        if key == CHECKPOINT_ENGINE_BUCKET:  # inside an inert mapping, but read (adopt_newer_places)
            reason = None
        if key.startswith(("hydra.", "hydra/")):  # from a config file's hydra section or defaults list (config/loading.py)
            reason = HYDRA_REASON
        parts = key.split(".")
        if reason is None and not config.critic.enable and (parts[0] == "critic" or key in _CRITIC_KEYS):
            reason = "no critic in this run (the advantage estimator does not use values; critic.enable=true adds one)"
        elif reason is None and parts[:2] == ["actor_rollout_ref", "ref"] and not uses_reference(config):
            reason = NO_REF_REASON
        elif reason is None and "profiler" in parts:
            reason = PROFILER_REASON
        elif reason is None and parts[-1] == "ulysses_sequence_parallel_size":
            reason = SP_REASON if node_at(config, key) > 1 else None
        elif reason is None and _token_budget_reason(config, key):
            reason = _token_budget_reason(config, key)
        elif reason is None and key == "critic.enable" and config.critic.enable and not needs_critic(config.algorithm.adv_estimator):
            reason = (f"the critic is trained, but algorithm.adv_estimator={config.algorithm.adv_estimator} does not use its "
                      "values (gae does)")
        elif reason is None and key in ("data.label_key", "data.input_template", "data.apply_chat_template") \
                and config.data.custom_cls.path:
            reason = "the Dataset class of data.custom_cls makes the rows' prompts and ground truths"
        elif reason is None and key == "data.filter_overlong_prompts" and config.data.custom_cls.path:
            reason = ("the Dataset class of data.custom_cls chooses its own rows; its items longer than "
                      "data.max_prompt_length follow data.truncation as they are read")
        elif reason is None and key == "data.input_template" and "\\n" in (config.data.input_template or "") \
                and "\n" not in config.data.input_template and not config.data.apply_chat_template:
            reason = ("its \\n is a backslash and an n, not a line break (a shell passes what is typed between single quotes, "
                      "as with OpenRLHF's flag): write a line break with bash's $'...\\n...' or in a --config YAML file")
        elif reason is None and key == "data.input_template" and config.data.apply_chat_template:
            reason = "data.apply_chat_template renders string prompts with the chat template instead (as in OpenRLHF)"
        elif reason is None and key == "data.shuffle" and config.data.sampler.class_path:
            reason = "data.sampler.class_path sets the order of the training rows"
        elif reason is None and key == "data.train_batch_size" and step_batch(config)[0] == "data.gen_batch_size":
            reason = (f"without algorithm.filter_groups.enable each step draws and trains data.gen_batch_size="
                      f"{config.data.gen_batch_size} prompts, as verl's trainer does")
        elif (reason is None and key == "reward_model.launch_reward_fn_async" and config.reward_model.launch_reward_fn_async
              and config.algorithm.filter_groups.enable):
            reason = ("algorithm.filter_groups needs each generation batch's scores to decide which groups to keep, so "
                      "scoring stays synchronous")
        elif (reason is None and key.startswith("actor_rollout_ref.ref.fsdp_config.")
              and lora_enabled(config.actor_rollout_ref.model)):
            reason = "with LoRA the reference is the actor's own model with its adapters off, not a model of its own"
        elif reason is None and key.startswith("critic.fsdp.") and len(parts) > 2:  # verl's newer place of critic.model.fsdp_config
            reason = _fsdp_reason(config, "critic", parts[2])
        elif reason is None and key in _NEWER_PLACES:
            reason = _NEWER_PLACES[key]
        elif reason is None and key.startswith("data.sampler.group_") and not config.data.sampler.class_path:
            reason = "read by a sampler class (data.sampler.class_path) that uses it, as verl's GroupRatioSampler; none is set"
        elif (reason is None and key.endswith(".optim.zero_indexed_step")
              and node_at(config, key.removesuffix(".zero_indexed_step")).lr_scheduler_type != "cosine"):
            reason = "read by the cosine schedule only, as in verl"
        elif (reason is None and key.endswith(".optim.lr_wsd_stable_steps_ratio")
              and node_at(config, key.removesuffix(".lr_wsd_stable_steps_ratio")).lr_scheduler_type != "wsd"):
            reason = "acts only with lr_scheduler_type=wsd"
        elif reason is None and "override_config" in parts and parts[-1] in ATTENTION_KEYS:
            reason = _attention_reason(str(node_at(config, key.rpartition(".")[0])[parts[-1]]))
        elif reason is None and "fsdp_config" in parts:
            reason = _fsdp_reason(config, parts[0], parts[parts.index("fsdp_config") + 1])
        elif reason is None and key.startswith("actor_rollout_ref.rollout.") and parts[2] in _ENGINE_ONLY and rollout.name == "hf":
            reason = "vLLM/SGLang setting; this run generates with the hf engine"
        elif reason is None and key.startswith("actor_rollout_ref.rollout.") and parts[2] in _NOT_PASSED_TO_ENGINE:
            reason = _NOT_PASSED_TO_ENGINE[parts[2]]
        elif reason is None and key == "actor_rollout_ref.rollout.micro_batch_size_per_gpu" and rollout.name != "hf":
            reason = f"hf engine setting; {rollout.name} schedules its own batches"
        elif reason is None and key == "actor_rollout_ref.rollout.mode" and rollout.mode == "async":
            reason = "asynchronous rollout is planned; this run generates synchronously"
        elif (reason is None and key.startswith("actor_rollout_ref.rollout.val_kwargs.") and not rollout.val_kwargs.do_sample
              and parts[-1] in ("temperature", "top_k", "top_p", "n")):
            reason = ("validation decodes greedily while val_kwargs.do_sample=false, as verl's vLLM and SGLang rollouts did (its "
                      "newer agent loop samples regardless): " + ("the n responses are one response n times" if parts[-1] == "n"
                                                                  else "set val_kwargs.do_sample=true to sample"))
        elif reason is None and key.startswith("algorithm.rollout_correction."):
            reason = rollout_correction_reason(config.algorithm.rollout_correction, parts[-1])
        elif (reason is None and (key == "actor_rollout_ref.rollout.skip_dump_dir" or key.startswith("actor_rollout_ref.rollout.skip."))
              and key != "actor_rollout_ref.rollout.skip.enable" and not (rollout.skip.enable or rollout.skip_rollout)):
            reason = "acts only with actor_rollout_ref.rollout.skip.enable=true (or verl's earlier skip_rollout=true)"
        elif reason is None and key == "reward.num_workers" and config.reward_model.reward_manager != "remote":
            reason = ("read by reward_model.reward_manager=remote only (its processes); the other managers' parallelism is "
                      "reward_model.reward_kwargs' (max_concurrency, num_processes)")
        elif reason is None and key == "trainer.resume_from_path" and config.trainer.resume_mode != "resume_path":
            reason = (f"read with trainer.resume_mode=resume_path only, as in verl; resume_mode={config.trainer.resume_mode} "
                      + ("starts afresh" if config.trainer.resume_mode == "disable" else "resumes the run folder's latest checkpoint"))
        elif reason is None and key in ("custom_reward_function.name", "custom_reward_function.reward_weights") \
                and not config.custom_reward_function.path:
            what = "names a function" if key.endswith(".name") else "weighs the functions"
            reason = f"{what} in custom_reward_function.path, which is not set: the built-in scorers score the rows"
        elif reason is None and key == "trainer.test_freq" and config.trainer.test_freq > 0 and not config.data.val_files:
            reason = "data.val_files is not set, so there is nothing to validate"
        elif reason is None and key == "trainer.balance_batch" and world_size_of(config) == 1:
            reason = "one data-parallel rank: nothing to balance"
        elif reason is None and (parts[0] == "ray_kwargs" or key == "trainer.hang_dump_s") and not _uses_ray(config):
            reason = "one rank (trainer.nnodes x trainer.n_gpus_per_node) and no Ray address: this run works in-process, without Ray"
        elif reason is None:
            reason = (_reward_model_reason(config, key) or algorithm_reason(config, key) or _multi_turn_reason(config, key)
                      or _lora_reason(config, key) or distillation_reason(config, key))
        if reason:
            lines.append(f"{key}: {reason}")
    return lines + lone_groups(config)


def _multi_turn_reason(config: Config, key: str) -> str | None:
    """Why a multi_turn.* or agent.* key does nothing: multi-turn rollouts are off (a tool config path included: it is
    checked and loaded only with them on)."""
    rollout = "actor_rollout_ref.rollout."
    if (key.startswith((rollout + "multi_turn.", rollout + "agent.")) and key != rollout + "multi_turn.enable"
            and not config.actor_rollout_ref.rollout.multi_turn.enable):
        return "multi-turn rollouts are off (actor_rollout_ref.rollout.multi_turn.enable=true runs an agent loop per row)"
    if key == "data.return_raw_chat" and config.actor_rollout_ref.rollout.multi_turn.enable:
        return "agent loops render each row's chat messages themselves (with the tools), so they are kept, as verl 0.9 does"
    return None
