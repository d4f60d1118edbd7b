"""Fill in derived defaults and check values (what a final config makes a step do: `derived.py`).

Every check names the key and says what is allowed. The arithmetic follows verl's units:
`train_batch_size` and `ppo_mini_batch_size` count prompts, each sampled `rollout.n` times;
`*_micro_batch_size_per_gpu` counts trajectories on one data-parallel rank, and verl's deprecated
global `*_micro_batch_size` counts them over all ranks (divided by their number, as verl's workers do).

A key that stands for another (verl's older or newer name, a default that follows another key) is
checked under its own name before its value is copied, so an error names the key the user set.
"""

from __future__ import annotations

import re
from pathlib import Path

from reinforge.config.derived import step_batch
from reinforge.config.distillation_schema import check_distillation
from reinforge.config.fields import node_at
from reinforge.config.rollout_schema import TOOL_CALL_FORMATS, check_engine_kwargs
from reinforge.config.schema import Config
from reinforge.config.section_checks import (
    CHECKPOINT_CONTENTS,
    DTYPE_NAMES,
    LR_SCHEDULES,
    STRATEGIES,
    adopt_newer_places,
    chat_template,
    check_gdpo,
    check_lora,
    check_mixed_precision,
    check_optim,
    check_policy_loss,
    check_prompt_options,
    check_reward_model,
    check_rollout_correction,
    check_sandbox_fusion,
    check_unsupported,
    choice,
    positive,
)
from reinforge.errors import ConfigError

# verl's deprecated global micro-batch keys (section, key); each has a `<key>_per_gpu` that replaced it
GLOBAL_MICRO_BATCHES = (
    ("actor_rollout_ref.actor", "ppo_micro_batch_size"), ("actor_rollout_ref.rollout", "log_prob_micro_batch_size"),
    ("actor_rollout_ref.ref", "log_prob_micro_batch_size"), ("critic", "ppo_micro_batch_size"),
    ("critic", "forward_micro_batch_size"), ("reward_model", "micro_batch_size"),
)


def finalize(config: Config, quickstart: bool = False) -> None:
    """Resolve null defaults that derive from other keys, then validate everything. verl's newest layout (reward.*,
    critic.fsdp.*) sets the keys read here first; an error about such a key says where the value was given."""
    adopted = adopt_newer_places(config)
    try:
        _finalize(config)
    except ConfigError as error:
        text = str(error)
        given = [f"{ours} was given as {newer}" for newer, ours in adopted if re.search(rf"{re.escape(ours)}\b(?!\.)", text)]
        if not given:
            raise
        raise ConfigError(f"{text} ({'; '.join(given)}, verl's other place of it)") from None


def _finalize(config: Config) -> None:
    data, arr, trainer = config.data, config.actor_rollout_ref, config.trainer
    actor, rollout, optim = arr.actor, arr.rollout, arr.actor.optim
    if rollout.response_length is None:
        rollout.response_length = data.max_response_length
    if rollout.prompt_length is None:
        rollout.prompt_length = data.max_prompt_length
    positive("actor_rollout_ref.actor.clip_ratio", actor.clip_ratio, allow_zero=True)
    positive("data.dataloader_num_workers", data.dataloader_num_workers, allow_zero=True)
    chat_template("actor_rollout_ref.model.custom_chat_template", config.actor_rollout_ref.model.custom_chat_template)
    if actor.clip_ratio_low is None:
        actor.clip_ratio_low = actor.clip_ratio
    if actor.clip_ratio_high is None:
        actor.clip_ratio_high = actor.clip_ratio
    if optim.warmup_style is not None:
        choice("actor_rollout_ref.actor.optim.warmup_style", optim.warmup_style, LR_SCHEDULES)
        optim.lr_scheduler_type = optim.warmup_style
    if optim.clip_grad is not None:
        positive("actor_rollout_ref.actor.optim.clip_grad", optim.clip_grad)
        actor.grad_clip = optim.clip_grad
    multi_turn = rollout.multi_turn  # verl's data.tool_config_path interpolates the rollout's: the filter measures with its tools
    if data.tool_config_path is None and multi_turn.enable and multi_turn.tool_config_path:
        data.tool_config_path = multi_turn.tool_config_path
    if data.function_tool_path is None and multi_turn.enable and multi_turn.function_tool_path:
        data.function_tool_path = multi_turn.function_tool_path
    if data.seed is None:  # verl's null draws an unseeded order; trainer.seed keeps runs repeatable
        data.seed = trainer.seed
    _finalize_sample_limits(config)
    _finalize_tokenizer(config)
    if config.trainer.remove_previous_ckpt_in_save:  # verl's deprecated switch wins over the limits, as there
        config.trainer.max_actor_ckpt_to_keep = config.trainer.max_critic_ckpt_to_keep = 1
    if data.gen_batch_size is None:
        data.gen_batch_size = data.train_batch_size
    _finalize_critic(config)
    _finalize_token_budgets(config)
    if trainer.default_local_dir is None:
        trainer.default_local_dir = f"checkpoints/{trainer.project_name}/{trainer.experiment_name}"
    import torch

    _finalize_devices(config, torch.cuda.device_count())
    _finalize_micro_batches(config)
    legacy = config.reward_model.custom_reward_function
    if config.custom_reward_function.path is None and legacy is not None and legacy.path is not None:
        config.custom_reward_function = legacy
    _finalize_reward_model(config)

    _check(config)


def _finalize_devices(config: Config, visible_gpus: int) -> None:
    """trainer.device and n_gpus_per_node from the GPUs this machine sees, checked against them when the run is on this
    machine alone (one node, no Ray address: other nodes' GPUs cannot be seen from here)."""
    from reinforge.distributed.process_group import ray_address

    trainer = config.trainer
    on_this_machine = trainer.nnodes == 1 and ray_address(config) is None
    if trainer.device is None:
        trainer.device = "cuda" if visible_gpus else "cpu"
    choice("trainer.device", trainer.device, ("cpu", "cuda"))
    if trainer.device == "cuda" and on_this_machine and not visible_gpus:
        raise ConfigError("trainer.device=cuda but no CUDA GPU is visible to torch; use trainer.device=cpu")
    if trainer.n_gpus_per_node is None:
        if trainer.device == "cuda" and not visible_gpus:
            raise ConfigError("trainer.n_gpus_per_node=null means every GPU of this machine, but it has none; set "
                              "trainer.n_gpus_per_node to the GPUs of each node")
        trainer.n_gpus_per_node = visible_gpus if trainer.device == "cuda" else 1
    positive("trainer.n_gpus_per_node", trainer.n_gpus_per_node)
    if trainer.device == "cuda" and on_this_machine and trainer.n_gpus_per_node > visible_gpus:
        raise ConfigError(f"trainer.n_gpus_per_node={trainer.n_gpus_per_node} but this machine has {visible_gpus} "
                          f"visible GPU(s); set trainer.n_gpus_per_node={visible_gpus} or fewer (or null: all)")


def _finalize_tokenizer(config: Config) -> None:
    """verl's actor_rollout_ref.model.tokenizer_path and reinforge's data.tokenizer name the one tokenizer of the policy."""
    data, model_cfg = config.data, config.actor_rollout_ref.model
    if data.tokenizer and model_cfg.tokenizer_path and data.tokenizer != model_cfg.tokenizer_path:
        raise ConfigError(f"data.tokenizer={data.tokenizer} and actor_rollout_ref.model.tokenizer_path="
                          f"{model_cfg.tokenizer_path} both name the policy's tokenizer (the data, the engine and the "
                          "actor share one); set one")


def _finalize_sample_limits(config: Config) -> None:
    """verl's data.train_max_samples / val_max_samples are data.max_samples / max_val_samples."""
    data = config.data
    for verl_name, name in (("train_max_samples", "max_samples"), ("val_max_samples", "max_val_samples")):
        value, own = getattr(data, verl_name), getattr(data, name)
        if value is None:
            continue
        if own != -1 and own != value:
            raise ConfigError(f"data.{verl_name}={value} and data.{name}={own} are the same setting (verl's name and "
                              f"reinforge's); set one")
        setattr(data, name, value)


def _finalize_micro_batches(config: Config) -> None:
    """verl's deprecated global micro-batch sizes become their `_per_gpu` keys: divided by the data-parallel ranks and
    rounded down, as verl's workers do; both keys set is an error, as in verl (which checks the critic's and the reward
    model's only when they are on; off, their keys are reported as without effect). Then the per-rank defaults that
    follow another pass: the reference's the old-log-prob pass's, the critic's value pass its update's."""
    from reinforge.distributed.process_group import world_size_of

    ranks, trainer = world_size_of(config), config.trainer
    in_use = {"critic": config.critic.enable, "reward_model": config.reward_model.enable}
    for section_key, name in GLOBAL_MICRO_BATCHES:
        section = node_at(config, section_key)
        total, per_gpu = getattr(section, name), getattr(section, f"{name}_per_gpu")
        key = f"{section_key}.{name}"
        if total is None or not in_use.get(section_key, True):
            continue
        if per_gpu is not None:
            raise ConfigError(f"{key}={total} and {key}_per_gpu={per_gpu} are both set; {key} is verl's deprecated global "
                              f"micro-batch (over all data-parallel ranks), which verl refuses beside {name}_per_gpu: "
                              f"remove {key}")
        positive(key, total)
        if total < ranks:
            raise ConfigError(f"{key}={total} is verl's deprecated global micro-batch, split over the {ranks} data-parallel "
                              f"ranks (trainer.nnodes={trainer.nnodes} x trainer.n_gpus_per_node={trainer.n_gpus_per_node}): "
                              f"less than one trajectory per rank; set {key}_per_gpu (per rank) instead")
        setattr(section, f"{name}_per_gpu", total // ranks)
    ref, rollout, critic = config.actor_rollout_ref.ref, config.actor_rollout_ref.rollout, config.critic
    if ref.log_prob_micro_batch_size_per_gpu is None:
        ref.log_prob_micro_batch_size_per_gpu = rollout.log_prob_micro_batch_size_per_gpu
    if critic.forward_micro_batch_size_per_gpu is None:
        critic.forward_micro_batch_size_per_gpu = critic.ppo_micro_batch_size_per_gpu


def _finalize_reward_model(config: Config) -> None:
    """The chat messages kept for a reward model and for agent loops."""
    rm = config.reward_model
    if rm.enable:  # a reward model with another chat template, and the judge, rebuild the conversation from the messages
        config.data.return_raw_chat = True
    if config.actor_rollout_ref.rollout.multi_turn.enable:  # agent loops render the messages with the tools (verl 0.9 always
        config.data.return_raw_chat = True                 # keeps them, whatever return_raw_chat says)


def _finalize_token_budgets(config: Config) -> None:
    """verl's defaults of the token-budget keys: the old-log-prob, reference and critic passes follow
    actor.use_dynamic_bsz (the log-prob passes its budget too), the reward model follows the critic."""
    arr, critic, rm = config.actor_rollout_ref, config.critic, config.reward_model
    for section in (arr.rollout, arr.ref):
        if section.log_prob_use_dynamic_bsz is None:
            section.log_prob_use_dynamic_bsz = arr.actor.use_dynamic_bsz
        if section.log_prob_max_token_len_per_gpu is None:
            section.log_prob_max_token_len_per_gpu = arr.actor.ppo_max_token_len_per_gpu
    if critic.use_dynamic_bsz is None:
        critic.use_dynamic_bsz = arr.actor.use_dynamic_bsz
    if critic.forward_max_token_len_per_gpu is None:
        critic.forward_max_token_len_per_gpu = critic.ppo_max_token_len_per_gpu
    if rm.use_dynamic_bsz is None:
        rm.use_dynamic_bsz = critic.use_dynamic_bsz
    if rm.forward_max_token_len_per_gpu is None:
        rm.forward_max_token_len_per_gpu = critic.forward_max_token_len_per_gpu


def _finalize_critic(config: Config) -> None:
    """Critic keys left null follow the actor's (as in verl); `enable` follows the estimator."""
    from reinforge.algorithm import adv_estimator_names, import_custom_modules, needs_critic

    actor, critic = config.actor_rollout_ref.actor, config.critic
    import_custom_modules(config.algorithm.custom_modules)  # before any registry name is used
    choice("algorithm.adv_estimator", config.algorithm.adv_estimator, adv_estimator_names())
    uses_values = needs_critic(config.algorithm.adv_estimator)
    if critic.enable is None:
        critic.enable = uses_values
    elif uses_values and not critic.enable:
        raise ConfigError(f"algorithm.adv_estimator={config.algorithm.adv_estimator} needs a critic's values; "
                          "remove critic.enable=false")
    rollout_n = config.actor_rollout_ref.rollout.n
    if critic.rollout_n is not None and critic.rollout_n != rollout_n:
        raise ConfigError(f"critic.rollout_n={critic.rollout_n} differs from actor_rollout_ref.rollout.n={rollout_n}; the "
                          "critic trains on the rollout's trajectories, so its mini-batches hold ppo_mini_batch_size x "
                          "actor_rollout_ref.rollout.n of them: remove critic.rollout_n")
    for key in ("ppo_mini_batch_size", "ppo_epochs", "shuffle", "loss_agg_mode", "loss_scale_factor"):
        if getattr(critic, key) is None:
            setattr(critic, key, getattr(actor, key))
    if critic.model.path is None:
        critic.model.path = config.actor_rollout_ref.model.path
    if critic.optim.warmup_style is not None:
        choice("critic.optim.warmup_style", critic.optim.warmup_style, LR_SCHEDULES)
        critic.optim.lr_scheduler_type = critic.optim.warmup_style
    if critic.optim.clip_grad is not None:
        positive("critic.optim.clip_grad", critic.optim.clip_grad)
        critic.grad_clip = critic.optim.clip_grad


def _check(config: Config) -> None:
    from reinforge.algorithm import KL_PENALTIES, LOSS_AGG_MODES, PF_PPO_METHODS, policy_loss_names
    from reinforge.distributed.process_group import world_size_of
    from reinforge.environment.dataset import TRUNCATION_MODES
    from reinforge.reward.manager import reward_manager_names

    data, arr, algo, trainer = config.data, config.actor_rollout_ref, config.algorithm, config.trainer
    actor, rollout, optim = arr.actor, arr.rollout, arr.actor.optim

    choice("data.truncation", data.truncation, TRUNCATION_MODES)
    check_prompt_options(data)
    for key, strategy in (("actor_rollout_ref.actor.strategy", actor.strategy), ("actor_rollout_ref.ref.strategy", arr.ref.strategy),
                          ("critic.strategy", config.critic.strategy)):
        choice(key, strategy, STRATEGIES)
    choice("actor_rollout_ref.actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    choice("actor_rollout_ref.actor.kl_loss_type", actor.kl_loss_type, KL_PENALTIES)
    choice("actor_rollout_ref.actor.optim.lr_scheduler_type", optim.lr_scheduler_type, LR_SCHEDULES)
    choice("actor_rollout_ref.actor.policy_loss.loss_mode", actor.policy_loss.loss_mode, policy_loss_names())
    for key, fsdp_config in (("actor_rollout_ref.actor.fsdp_config", actor.fsdp_config),
                             ("actor_rollout_ref.ref.fsdp_config", arr.ref.fsdp_config),
                             ("critic.model.fsdp_config", config.critic.model.fsdp_config)):
        choice(f"{key}.model_dtype", fsdp_config.model_dtype, DTYPE_NAMES)
        check_mixed_precision(key, fsdp_config.mixed_precision)
    if rollout.name == "sglang_async":  # verl 0.4's name of its SGLang engine for multi-turn rollouts
        raise ConfigError("actor_rollout_ref.rollout.name='sglang_async' is verl's older name of its SGLang engine; write "
                          "sglang (or hf on a machine without a GPU)")
    choice("actor_rollout_ref.rollout.name", rollout.name, ("hf", "vllm", "sglang"))
    check_engine_kwargs(rollout.engine_kwargs, "vllm" if rollout.name == "hf" else rollout.name)
    choice("actor_rollout_ref.rollout.skip.action", rollout.skip.action, ("cache", "repeat", "repeat_last"))
    positive("actor_rollout_ref.rollout.skip.max_dump_step", rollout.skip.max_dump_step, allow_zero=True)
    if (rollout.skip.enable or rollout.skip_rollout) and rollout.skip.max_dump_step == 0 and rollout.skip.action != "cache":
        raise ConfigError(f"actor_rollout_ref.rollout.skip.max_dump_step=0 dumps no step, so action={rollout.skip.action} "
                          "would have nothing to read back; dump at least one step, or set skip.action=cache")
    choice("actor_rollout_ref.rollout.mode", rollout.mode, ("sync", "async"))
    choice("actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side", rollout.multi_turn.tool_response_truncate_side,
            ("left", "right", "middle"))
    choice("actor_rollout_ref.rollout.multi_turn.format", rollout.multi_turn.format, TOOL_CALL_FORMATS)
    positive("actor_rollout_ref.rollout.multi_turn.max_parallel_calls", rollout.multi_turn.max_parallel_calls)
    positive("reward.num_workers", config.reward.num_workers)
    positive("actor_rollout_ref.rollout.multi_turn.max_tool_response_length", rollout.multi_turn.max_tool_response_length)
    positive("actor_rollout_ref.rollout.multi_turn.max_assistant_turns", rollout.multi_turn.max_assistant_turns, allow_zero=True)
    positive("actor_rollout_ref.rollout.multi_turn.max_user_turns", rollout.multi_turn.max_user_turns, allow_zero=True)
    for name in ("tool_config_path", "function_tool_path", "interaction_config_path"):  # checked at start, before any model loads
        path = getattr(rollout.multi_turn, name)
        if rollout.multi_turn.enable and path and not Path(path).expanduser().is_file():
            raise ConfigError(f"actor_rollout_ref.rollout.multi_turn.{name}={path!r}: no such file")
    if rollout.multi_turn.enable:  # custom loops load and the default loop is known before any model loads
        from reinforge.inference.agent import check_agent_config

        check_agent_config(rollout.multi_turn, rollout.agent)
    choice("algorithm.kl_penalty", algo.kl_penalty, KL_PENALTIES)
    choice("algorithm.kl_ctrl.type", algo.kl_ctrl.type, ("fixed", "adaptive"))
    choice("reward_model.reward_manager", config.reward_model.reward_manager, reward_manager_names())
    name = config.custom_reward_function.name
    if not (isinstance(name, str) and name) and not (
            isinstance(name, list) and name and all(isinstance(n, str) and n for n in name)):
        raise ConfigError(f"custom_reward_function.name={name!r} must be a function's name, or a list of names of TRL "
                          "reward functions")
    choice("trainer.resume_mode", trainer.resume_mode, ("auto", "disable", "resume_path"))
    if trainer.val_only and not data.val_files:
        raise ConfigError("trainer.val_only=True validates once and exits, but data.val_files is not set, so there is nothing "
                          "to validate; set data.val_files to the validation data, or leave trainer.val_only unset to train")
    positive("trainer.peak_flops", trainer.peak_flops)
    from reinforge.trainer.tracking import check_loggers, logger_names

    trainer.logger = logger_names(trainer.logger)  # verl also takes a bare string: trainer.logger=console
    check_loggers(trainer.logger, trainer.project_name)
    choice("critic.optim.lr_scheduler_type", config.critic.optim.lr_scheduler_type, LR_SCHEDULES)
    choice("critic.loss_agg_mode", config.critic.loss_agg_mode, LOSS_AGG_MODES)
    choice("algorithm.filter_groups.filter_type", algo.filter_groups.filter_type, ("same_value", "band_pass"))
    choice("algorithm.pf_ppo.reweight_method", algo.pf_ppo.reweight_method, PF_PPO_METHODS)
    bounds = algo.filter_groups
    if bounds.lower_bound is not None and bounds.upper_bound is not None and bounds.lower_bound > bounds.upper_bound:
        raise ConfigError(f"algorithm.filter_groups.lower_bound={bounds.lower_bound} is above upper_bound={bounds.upper_bound}: "
                          "band_pass keeps the groups whose mean metric lies between them, so no group could pass")
    if algo.filter_groups.metric == "seq_final_reward":
        raise ConfigError("algorithm.filter_groups.metric=seq_final_reward is not supported; use seq_reward (the summed score) "
                          "or a key your reward function returns")
    from reinforge.algorithm.filter import SUMMED_REWARD

    rm_alone = config.reward_model.enable and not config.custom_reward_function.path  # its keys are known: rm_score
    if bounds.enable and rm_alone and bounds.metric not in (*SUMMED_REWARD, "rm_score"):
        raise ConfigError(f"algorithm.filter_groups.metric={bounds.metric!r}: the reward is the reward model's score alone "
                          "(no custom_reward_function.path), which gives no such key; use seq_reward or rm_score")
    if data.datagen.path and data.custom_cls.path:
        raise ConfigError("data.datagen.path adds generated rows to the built-in dataset, but data.custom_cls.path replaces it; "
                          "unset one (a custom Dataset class can grow itself in its own on_batch_end(batch) method)")

    for key, value in [
        ("data.train_batch_size", data.train_batch_size),
        ("data.max_prompt_length", data.max_prompt_length),
        ("data.max_response_length", data.max_response_length),
        ("data.val_batch_size", data.val_batch_size),
        ("actor_rollout_ref.rollout.n", rollout.n),
        ("actor_rollout_ref.rollout.response_length", rollout.response_length),
        ("actor_rollout_ref.rollout.val_kwargs.n", rollout.val_kwargs.n),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", rollout.log_prob_micro_batch_size_per_gpu),
        ("actor_rollout_ref.rollout.micro_batch_size_per_gpu", rollout.micro_batch_size_per_gpu),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", arr.ref.log_prob_micro_batch_size_per_gpu),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", actor.ppo_micro_batch_size_per_gpu),
        ("actor_rollout_ref.actor.ppo_epochs", actor.ppo_epochs),
        ("actor_rollout_ref.actor.clip_ratio_c", actor.clip_ratio_c),
        ("actor_rollout_ref.actor.tau_pos", actor.tau_pos),
        ("actor_rollout_ref.actor.tau_neg", actor.tau_neg),
        ("actor_rollout_ref.actor.loss_scale_factor", actor.loss_scale_factor),
        ("actor_rollout_ref.actor.policy_loss.clip_cov_ratio", actor.policy_loss.clip_cov_ratio),
        ("actor_rollout_ref.actor.policy_loss.kl_cov_ratio", actor.policy_loss.kl_cov_ratio),
        ("data.gen_batch_size", data.gen_batch_size),
        ("critic.ppo_mini_batch_size", config.critic.ppo_mini_batch_size),
        ("critic.ppo_micro_batch_size_per_gpu", config.critic.ppo_micro_batch_size_per_gpu),
        ("critic.forward_micro_batch_size_per_gpu", config.critic.forward_micro_batch_size_per_gpu),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", actor.ppo_max_token_len_per_gpu),
        ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", rollout.log_prob_max_token_len_per_gpu),
        ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", arr.ref.log_prob_max_token_len_per_gpu),
        ("critic.ppo_max_token_len_per_gpu", config.critic.ppo_max_token_len_per_gpu),
        ("critic.forward_max_token_len_per_gpu", config.critic.forward_max_token_len_per_gpu),
        ("reward_model.forward_max_token_len_per_gpu", config.reward_model.forward_max_token_len_per_gpu),
        ("critic.ppo_epochs", config.critic.ppo_epochs),
        ("critic.optim.lr", config.critic.optim.lr),
        ("critic.grad_clip", config.critic.grad_clip),
        ("actor_rollout_ref.actor.grad_clip", actor.grad_clip),  # 0 would scale every gradient to nothing
        ("algorithm.kl_ctrl.horizon", algo.kl_ctrl.horizon),
        ("algorithm.kl_ctrl.target_kl", algo.kl_ctrl.target_kl),
        ("trainer.total_epochs", trainer.total_epochs),
        ("trainer.total_training_steps", trainer.total_training_steps),
        ("trainer.nnodes", trainer.nnodes),
    ]:
        positive(key, value)
    for key, value in [
        ("actor_rollout_ref.actor.optim.lr", optim.lr),
        ("actor_rollout_ref.actor.optim.weight_decay", optim.weight_decay),
        ("actor_rollout_ref.actor.clip_ratio_low", actor.clip_ratio_low),
        ("actor_rollout_ref.actor.clip_ratio_high", actor.clip_ratio_high),
        ("actor_rollout_ref.actor.kl_loss_coef", actor.kl_loss_coef),
        ("actor_rollout_ref.rollout.temperature", rollout.temperature),
        ("actor_rollout_ref.rollout.val_kwargs.temperature", rollout.val_kwargs.temperature),
        ("algorithm.kl_ctrl.kl_coef", algo.kl_ctrl.kl_coef),
        ("trainer.log_val_generations", trainer.log_val_generations),
        ("trainer.critic_warmup", trainer.critic_warmup),
        ("trainer.max_nonfinite_steps", trainer.max_nonfinite_steps),
        ("trainer.hang_dump_s", trainer.hang_dump_s),
        ("critic.cliprange_value", config.critic.cliprange_value),
        ("critic.optim.weight_decay", config.critic.optim.weight_decay),
        ("algorithm.filter_groups.max_num_gen_batches", algo.filter_groups.max_num_gen_batches),
        ("algorithm.filter_groups.tolerance", algo.filter_groups.tolerance),
    ]:
        positive(key, value, allow_zero=True)
    for key, top_p in (("top_p", rollout.top_p), ("val_kwargs.top_p", rollout.val_kwargs.top_p)):
        if not 0 < top_p <= 1:
            raise ConfigError(f"actor_rollout_ref.rollout.{key}={top_p} must be in (0, 1]")
    if rollout.temperature == 0:  # the actor divides the logits by it to compute the log-probs the loss takes
        raise ConfigError("actor_rollout_ref.rollout.temperature=0: the actor divides the logits by the rollout temperature "
                          "when it computes the responses' log-probs; for greedy rollouts set do_sample=false and leave the "
                          "temperature at 1.0 (do_sample=false alone decodes greedily)")
    for key, value in (("algorithm.gamma", algo.gamma), ("algorithm.lam", algo.lam)):
        if value is not None and not 0 <= value <= 1:  # a discount, a GAE weight
            raise ConfigError(f"{key}={value} must be in [0, 1]")
    check_policy_loss(actor)
    if actor.mask_truncated_responses and rollout.ignore_eos:
        raise ConfigError("actor_rollout_ref.actor.mask_truncated_responses leaves responses cut at the length limit out of "
                          "the loss, and rollout.ignore_eos=true cuts every response there: nothing would be learned")
    for key, section in (("actor_rollout_ref.actor", actor), ("critic", config.critic)):
        check_optim(f"{key}.optim", section.optim)
        if section.checkpoint.load_contents is None:  # what was saved, but the huggingface/ export, which is not resumed from
            section.checkpoint.load_contents = [c for c in section.checkpoint.save_contents if c != "hf_model"]
        for name in ("save_contents", "load_contents"):
            contents = getattr(section.checkpoint, name)
            unknown = [entry for entry in contents if entry not in CHECKPOINT_CONTENTS]
            if unknown:
                raise ConfigError(f"{key}.checkpoint.{name}={contents}: {unknown} {'is' if len(unknown) == 1 else 'are'} not "
                                  f"among {', '.join(CHECKPOINT_CONTENTS)}")
    if rollout.dtype is not None:
        choice("actor_rollout_ref.rollout.dtype", rollout.dtype, ("fp32", "bf16", "float32", "bfloat16"))
    check_rollout_correction(config)
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<run folder>/global_step_<N>")


    ranks = world_size_of(config)
    ranks_source = f"trainer.nnodes={trainer.nnodes} x trainer.n_gpus_per_node={trainer.n_gpus_per_node}"
    step_key, prompts = step_batch(config)  # data.gen_batch_size when set apart without filter_groups, as verl's loader
    if prompts * rollout.n % ranks:
        raise ConfigError(
            f"{step_key}={prompts} x rollout.n={rollout.n} = {prompts * rollout.n} "
            f"trajectories do not split evenly over the {ranks} data-parallel ranks ({ranks_source})"
        )
    if actor.ppo_mini_batch_size > prompts:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} is larger than "
            f"{step_key}={prompts}; both count prompts"
        )
    if prompts % actor.ppo_mini_batch_size:
        raise ConfigError(
            f"{step_key}={prompts} is not a multiple of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size}; every mini-batch must be full"
        )
    for role, section in (("actor_rollout_ref.actor", actor), ("critic", config.critic)):
        if role == "critic" and not config.critic.enable:
            continue
        if role == "critic" and prompts % section.ppo_mini_batch_size:
            raise ConfigError(
                f"{role}.ppo_mini_batch_size={section.ppo_mini_batch_size} must divide {step_key}="
                f"{prompts} (both count prompts); every mini-batch must be full"
            )
        mini = section.ppo_mini_batch_size * rollout.n
        if mini % ranks:
            raise ConfigError(
                f"{role}.ppo_mini_batch_size={section.ppo_mini_batch_size} x rollout.n={rollout.n} = {mini} trajectories "
                f"do not split evenly over the {ranks} data-parallel ranks ({ranks_source}); every rank takes an equal "
                "share of each mini-batch"
            )
        micro = section.ppo_micro_batch_size_per_gpu
        if micro is not None and (mini // ranks) % micro:
            per_rank = f" ({mini // ranks} on each of {ranks} ranks)" if ranks > 1 else ""
            given = (f"{role}.ppo_micro_batch_size={section.ppo_micro_batch_size} ({micro} per rank over {ranks} ranks)"
                     if section.ppo_micro_batch_size is not None else f"{role}.ppo_micro_batch_size_per_gpu={micro}")
            raise ConfigError(
                f"{given} does not divide the mini-batch of "
                f"{mini} trajectories{per_rank} (ppo_mini_batch_size={section.ppo_mini_batch_size} x rollout.n={rollout.n})"
            )
    if algo.filter_groups.enable and rollout.n < 2:
        raise ConfigError("algorithm.filter_groups needs groups to compare: set actor_rollout_ref.rollout.n >= 2")
    if algo.adv_estimator == "grpo_passk" and rollout.n < 2:
        raise ConfigError("algorithm.adv_estimator=grpo_passk compares the best two responses per prompt: "
                          "set actor_rollout_ref.rollout.n >= 2")
    max_resp_len = config.reward_model.reward_kwargs.get("max_resp_len")
    if config.reward_model.reward_manager == "dapo":  # the overlong shaping's settings, as the manager will read them
        from reinforge.reward.manager.dapo import overlong_buffer

        overlong_buffer(max_resp_len, config.reward_model.reward_kwargs.get("overlong_buffer_cfg"))
    if isinstance(max_resp_len, int) and max_resp_len > rollout.response_length:
        raise ConfigError(f"reward_model.reward_kwargs.max_resp_len={max_resp_len} is longer than the responses "
                          f"(actor_rollout_ref.rollout.response_length={rollout.response_length}); the overlong "
                          "penalty is measured against it, so set it to the response length")

    check_unsupported(config)
    check_reward_model(config)
    check_sandbox_fusion(config)
    check_lora(config)
    check_gdpo(config)
    check_distillation(config.distillation)
    positive("actor_rollout_ref.rollout.update_weights_bucket_megabytes", rollout.update_weights_bucket_megabytes)
    positive("actor_rollout_ref.rollout.tensor_model_parallel_size", rollout.tensor_model_parallel_size)
    from reinforge.inference.factory import check_gpu_engine  # imported here: the config package does not load inference

    check_gpu_engine(config)
