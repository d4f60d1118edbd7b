"""Checks of one config section each, and the two checks every check uses (a value among names, a number's sign).

`validate.py` runs them after the derived defaults are filled in. Every error names the key the user set and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

from reinforge.config.engine_schema import FSDPConfig
from reinforge.config.schema import Config
from reinforge.errors import ConfigError

STRATEGIES = ("fsdp", "fsdp2")  # the same thing: FSDP2 over several ranks, a plain module on one
DTYPE_NAMES = ("fp32", "bf16", "float32", "bfloat16", "32")  # "32": verl's PrecisionType spelling of fp32
LR_SCHEDULES = ("constant", "cosine", "wsd", "linear")
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")


def choice(key: str, value: object, allowed: tuple | list) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(str(value), [str(name) for name in allowed], n=1, cutoff=0.75)
        raise ConfigError(f"{key}={value!r} is not one of: {', '.join(map(str, allowed))}"
                          + (f"; did you mean {close[0]!r}?" if close else ""))


def chat_template(key: str, template: str | None) -> None:
    """A ConfigError when a chat template setting holds no Jinja ({{ }} or {% %}): a path or a name given where the
    template's text belongs would render every prompt as that text."""
    if template is not None and "{{" not in str(template) and "{%" not in str(template):
        raise ConfigError(f"{key}={template!r} is not a Jinja chat template (no {{{{ }}}} or {{% %}}); give the template's "
                          f"text itself (on a command line, quoted for Hydra: \"{key}=\\\"$(cat template.jinja)\\\"\")")
    if template is not None:
        import jinja2
        from transformers.utils.chat_template_utils import _compile_jinja_template  # as transformers renders it

        try:
            _compile_jinja_template(str(template))
        except jinja2.TemplateError as error:
            line = f" (line {error.lineno} of the template)" if getattr(error, "lineno", None) else ""
            raise ConfigError(f"{key}: the chat template is not valid Jinja: {error.message}{line}") from None


def check_prompt_options(data) -> None:
    """A ConfigError when the prompt template (OpenRLHF's --input_template, "User: {}\\nAssistant: ") has no single `{}`
    where the prompt goes, or other braces str.format would read, or the label column is the prompt column."""
    label_key = getattr(data, "label_key", None)
    if label_key is not None and label_key == data.prompt_key:
        raise ConfigError(f"data.label_key={label_key!r} is the prompt column (data.prompt_key); name the answers' column")
    key, template = "data.input_template", data.input_template
    if template is None:
        return
    try:
        ok = isinstance(template, str) and template.format("\0").count("\0") == 1
    except (IndexError, KeyError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{key}={template!r} must be a string with one {{}} where the prompt goes (as OpenRLHF's "
                          "--input_template, 'User: {}\\nAssistant: '); write other braces doubled, {{ and }}")


def positive(key: str, value: float | int | None, allow_zero: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if allow_zero else '> 0'}")


def check_rollout_correction(config: Config) -> None:
    """algorithm.rollout_correction: known levels, options and loss types, thresholds that parse, engine log-probs to use."""
    from reinforge.algorithm import rollout_correction as rc

    corr = config.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    if corr.rollout_is is not None:
        choice(f"{key}.rollout_is", corr.rollout_is, rc.IS_LEVELS)
        try:
            rc.parse_is_threshold(corr.rollout_is_threshold)
        except ValueError as err:
            raise ConfigError(f"{key}.rollout_is_threshold={corr.rollout_is_threshold!r} must be {err}") from None
    if corr.rollout_rs is not None:
        try:
            options = rc.parse_rs_options(corr.rollout_rs)
        except ValueError as err:
            raise ConfigError(f"{key}.rollout_rs={corr.rollout_rs!r} must be {err}") from None
        try:
            rc.parse_rs_thresholds(options, corr.rollout_rs_threshold)
        except ValueError as err:
            raise ConfigError(f"{key}.rollout_rs_threshold={corr.rollout_rs_threshold!r} (rollout_rs={corr.rollout_rs}) "
                              f"must be {err}") from None
    choice(f"{key}.loss_type", corr.loss_type, rc.LOSS_TYPES)
    loss_mode = config.actor_rollout_ref.actor.policy_loss.loss_mode
    if corr.bypass_mode and loss_mode != "vanilla":
        raise ConfigError(f"{key}.bypass_mode=true replaces the policy loss by {key}.loss_type (ppo_clip is the vanilla "
                          f"loss), so actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} would be ignored; drop one")
    from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY, needs_sum_pi_squared
    from reinforge.algorithm.policy_loss import POLICY_LOSS_REGISTRY

    estimator = config.algorithm.adv_estimator
    if corr.bypass_mode and estimator in ADV_ESTIMATOR_REGISTRY and needs_sum_pi_squared(estimator):
        raise ConfigError(f"algorithm.adv_estimator={estimator} weighs its baseline by the actor's sum of squared token "
                          f"probabilities, which the old-log-prob pass computes and {key}.bypass_mode=true skips; drop one")
    if corr.bypass_mode and config.actor_rollout_ref.actor.calculate_sum_pi_squared:
        raise ConfigError(f"actor_rollout_ref.actor.calculate_sum_pi_squared=true adds sum_pi_squared in the old-log-prob pass, "
                          f"which {key}.bypass_mode=true skips; drop one")
    if (corr.rollout_is is not None and not corr.bypass_mode and loss_mode in POLICY_LOSS_REGISTRY
            and not POLICY_LOSS_REGISTRY.takes(loss_mode, "rollout_is_weights")):
        fn = POLICY_LOSS_REGISTRY[loss_mode]
        raise ConfigError(f"{key}.rollout_is={corr.rollout_is} weights the policy loss per token, but "
                          f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} ({fn.__module__}.{fn.__qualname__}) has no "
                          "rollout_is_weights argument, so the weights would be dropped; add `rollout_is_weights=None` to its "
                          "signature and multiply the per-token losses by it when given (docs/algorithms.md), or unset "
                          f"{key}.rollout_is")


def check_policy_loss(actor) -> None:
    """ConfigError naming the first setting of actor.policy_loss (and the clip cap) its loss cannot use."""
    params, key = actor.policy_loss, "actor_rollout_ref.actor.policy_loss"
    cppo = params.cppo
    for name, value in (("clip_cov_ratio", params.clip_cov_ratio), ("kl_cov_ratio", params.kl_cov_ratio),
                        ("cppo.cppo_delta_b_q", cppo.cppo_delta_b_q)):
        if not 0 <= value <= 1:  # fractions of tokens, a quantile
            raise ConfigError(f"{key}.{name}={value} must be in [0, 1]")
    for name, value in (("ppo_kl_coef", params.ppo_kl_coef), ("topr_negative_ratio_lower", params.topr_negative_ratio_lower),
                        ("cppo.cppo_delta_b", cppo.cppo_delta_b), ("cppo.cppo_delta_b_k", cppo.cppo_delta_b_k)):
        positive(f"{key}.{name}", value, allow_zero=True)
    if not 0 < cppo.cppo_w_min <= 1:
        raise ConfigError(f"{key}.cppo.cppo_w_min={cppo.cppo_w_min} must be in (0, 1]: the last position's weight, the first's "
                          "being 1")
    for low, high, what in (("clip_cov_lb", "clip_cov_ub", "clip_cov picks tokens whose covariance lies between them, so none "
                                                          "could be picked"),
                            ("topr_negative_ratio_lower", "topr_negative_ratio_upper", "topr clamps a weight between them")):
        if getattr(params, low) > getattr(params, high):
            raise ConfigError(f"{key}.{low}={getattr(params, low)} is above {high}={getattr(params, high)}: {what}")
    mode = params.loss_mode  # dppo_tv, dppo_kl and cppo take any positive clip_ratio_c (a cap on the ratio), as verl's do
    if mode == "dro" and (params.dro_beta is None or not params.dro_beta > 0):
        raise ConfigError(f"{key}.dro_beta={params.dro_beta} must be a positive number with policy_loss.loss_mode=dro: the "
                          "weight of its squared log-ratio penalty (verl has no default either)")
    if mode in ("vanilla", "up") and actor.clip_ratio_c <= 1:
        raise ConfigError(f"actor_rollout_ref.actor.clip_ratio_c={actor.clip_ratio_c} must be > 1: policy_loss.loss_mode={mode} "
                          "caps a negative advantage's loss at clip_ratio_c times it (dual-clip)")


def check_optim(key: str, optim) -> None:
    """An optimizer section (`key` = actor_rollout_ref.actor.optim or critic.optim): values torch and the schedule accept."""
    from reinforge.training.optim import optimizer_class

    if len(optim.betas) != 2 or not all(0 <= beta < 1 for beta in optim.betas):
        raise ConfigError(f"{key}.betas={list(optim.betas)} must be two numbers in [0, 1)")
    positive(f"{key}.eps", optim.eps, allow_zero=True)
    for name in ("min_lr_ratio", "lr_warmup_steps_ratio"):
        if not 0 <= getattr(optim, name) <= 1:
            raise ConfigError(f"{key}.{name}={getattr(optim, name)} must be in [0, 1]")
    positive(f"{key}.num_cycles", optim.num_cycles, allow_zero=True)
    if optim.override_optimizer_config is not None and not isinstance(optim.override_optimizer_config, dict):
        raise ConfigError(f"{key}.override_optimizer_config={optim.override_optimizer_config!r} must be a mapping of "
                          "keyword arguments for the optimizer, e.g. {amsgrad: true}")
    optimizer_class(optim, key)  # importable, and an optimizer


def check_mixed_precision(key: str, settings: dict) -> None:
    """`<key>.mixed_precision` holds only verl's dtype keys, each naming a dtype."""
    for name, value in settings.items():
        if name not in ("param_dtype", "reduce_dtype", "buffer_dtype"):
            raise ConfigError(f"{key}.mixed_precision.{name}: unknown; known: param_dtype, reduce_dtype, buffer_dtype")
        choice(f"{key}.mixed_precision.{name}", value, DTYPE_NAMES)


def check_sandbox_fusion(config: Config) -> None:
    sandbox = config.reward_model.sandbox_fusion
    key = "reward_model.sandbox_fusion"
    if sandbox.url is not None and not str(sandbox.url).startswith(("http://", "https://")):
        raise ConfigError(f"{key}.url={sandbox.url!r} must be an http(s) URL of the service's /run_code endpoint, "
                          "e.g. http://localhost:8080/run_code")
    for name, value in (("max_concurrent", sandbox.max_concurrent), ("memory_limit_mb", sandbox.memory_limit_mb)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key}.{name}={value!r} must be a positive integer")


def check_reward_model(config: Config) -> None:
    """reward_model.* when a reward model is on: a model folder, sizes, and a judge template and pattern that work."""
    from reinforge.reward.models.judge import check_judge_config

    rm = config.reward_model
    if not rm.enable:
        return
    if not rm.model.path:
        raise ConfigError("reward_model.enable=true needs reward_model.model.path=<folder of a Hugging Face sequence "
                          "classifier, or of a causal LM with reward_model.judge.enable=true>")
    choice("reward_model.strategy", rm.strategy, STRATEGIES)
    choice("reward_model.model.fsdp_config.model_dtype", rm.model.fsdp_config.model_dtype, DTYPE_NAMES)
    positive("reward_model.micro_batch_size_per_gpu", rm.micro_batch_size_per_gpu)
    positive("reward_model.max_length", rm.max_length)
    if rm.judge.enable:
        check_judge_config(rm.judge)


def lora_enabled(model_cfg) -> bool:
    """The model section (actor_rollout_ref.model, critic.model) asks for LoRA adapters: a rank or an adapter folder."""
    return model_cfg.get("lora_rank", 0) > 0 or bool(model_cfg.get("lora_adapter_path"))


def check_lora(config: Config) -> None:
    """LoRA settings of the actor and the critic: a rank >= 0, alpha > 0, an adapter folder that exists, peft installed."""
    import importlib.util

    for section, model_cfg in (("actor_rollout_ref.model", config.actor_rollout_ref.model), ("critic.model", config.critic.model)):
        positive(f"{section}.lora_rank", model_cfg.lora_rank, allow_zero=True)
        positive(f"{section}.lora_alpha", model_cfg.lora_alpha)
        adapter = model_cfg.get("lora_adapter_path")
        if adapter and not (Path(adapter).expanduser() / "adapter_config.json").is_file():
            raise ConfigError(f"{section}.lora_adapter_path={adapter}: no adapter_config.json there; name a peft adapter folder "
                              "(a checkpoint's actor/lora_adapter, or one saved with save_pretrained)")
        in_use = section == "actor_rollout_ref.model" or config.critic.enable
        if in_use and lora_enabled(model_cfg) and importlib.util.find_spec("peft") is None:
            raise ConfigError(f"{section}.lora_rank asks for LoRA adapters, which need the peft package: "
                              "pip install 'reinforge[lora]'")


SP_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model")  # with ulysses_sequence_parallel_size
FSDP_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model", "reward_model.model")  # with fsdp_config


def check_unsupported(config: Config) -> None:
    """verl settings that would change what is trained, which this version does not do: an error unless at their default.
    Settings that change only speed or memory are accepted (config/unused.py reports them)."""
    from reinforge.config.fields import node_at

    rollout = config.actor_rollout_ref.rollout
    if rollout.over_sample_rate != 0:
        raise ConfigError(f"actor_rollout_ref.rollout.over_sample_rate={rollout.over_sample_rate}: stopping generation early "
                          "and training on the cut-off requests is not supported in this version; remove it (0: every "
                          "request finishes)")
    if rollout.name == "sglang" and config.actor_rollout_ref.model.hf_config_path:
        raise ConfigError("actor_rollout_ref.model.hf_config_path is not supported with actor_rollout_ref.rollout.name=sglang "
                          "(SGLang reads config.json from the model folder); use rollout.name=vllm or hf, or put the "
                          "config.json in actor_rollout_ref.model.path")
    keys = [f"{section}.ulysses_sequence_parallel_size" for section in SP_SECTIONS]
    keys += [f"{section}.fsdp_config.ulysses_sequence_parallel_size" for section in FSDP_SECTIONS]
    for key in keys:
        section, _, name = key.rpartition(".")
        positive(key, getattr(node_at(config, section), name))
    for key in ("data_parallel_size", "expert_parallel_size"):
        positive(f"actor_rollout_ref.rollout.{key}", getattr(rollout, key))
    _check_unsupported_verl_features(config)
    check_newer_verl_layout(config)


def _refuse(key: str, value: object, what: str, default: object) -> None:
    raise ConfigError(f"{key}={value}: {what} is not supported in this version; remove it (verl's default: {default})")


def _check_unsupported_verl_features(config: Config) -> None:
    """Newer verl keys that change what is trained: each is accepted at verl's default only."""
    from reinforge.config.fields import node_at

    arr = config.actor_rollout_ref
    rollout, n = arr.rollout, arr.rollout.n
    qat_keys = ["actor_rollout_ref.actor.qat", *(f"{section}.fsdp_config.qat" for section in FSDP_SECTIONS)]
    for key in qat_keys:
        section, _, name = key.rpartition(".")
        if (getattr(node_at(config, section), name) or {}).get("enable"):
            _refuse(f"{key}.enable", "true", "quantization-aware training", "false")
    for section in ("actor_rollout_ref.actor", "actor_rollout_ref.ref"):
        node = node_at(config, section)
        mode = (node.router_replay or {}).get("mode", "disabled")
        if mode != "disabled":
            _refuse(f"{section}.router_replay.mode", mode, "MoE router replay", "disabled")
        if node.rollout_n is not None and node.rollout_n != n:
            raise ConfigError(f"{section}.rollout_n={node.rollout_n} differs from actor_rollout_ref.rollout.n={n}; its "
                              f"batches hold the rollout's actor_rollout_ref.rollout.n responses per prompt: remove "
                              f"{section}.rollout_n")
    if (arr.model.mtp or {}).get("enable_train"):
        _refuse("actor_rollout_ref.model.mtp.enable_train", "true", "training the model's multi-token-prediction layers",
                "false")
    if rollout.logprobs_mode != "processed_logprobs":
        _refuse("actor_rollout_ref.rollout.logprobs_mode", rollout.logprobs_mode, "another kind of engine log-probs than "
                "processed_logprobs (after temperature, top-k and top-p)", "processed_logprobs")
    if rollout.enable_rollout_routing_replay:
        _refuse("actor_rollout_ref.rollout.enable_rollout_routing_replay", "true", "replaying the engine's MoE routing in "
                "training (R3)", "false")


def check_gdpo(config: Config) -> None:
    """adv_estimator=gdpo names its rewards; weights, when given, are numbers, one per reward."""
    algo = config.algorithm
    keys, weights = algo.gdpo_reward_keys, algo.gdpo_reward_weights
    if algo.adv_estimator == "gdpo" and not keys:
        raise ConfigError("algorithm.adv_estimator=gdpo normalises several rewards one by one: name them with "
                          "algorithm.gdpo_reward_keys='[format_reward,accuracy_reward]', keys of the dict your reward function "
                          "returns (docs/algorithms.md)")
    if keys is not None and not all(isinstance(key, str) for key in keys):
        raise ConfigError(f"algorithm.gdpo_reward_keys={keys!r} must be a list of names")
    if weights is not None:
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
            raise ConfigError(f"algorithm.gdpo_reward_weights={weights!r} must be a list of numbers")
        if keys is not None and len(weights) != len(keys):
            raise ConfigError(f"algorithm.gdpo_reward_weights has {len(weights)} weights for the {len(keys)} "
                              f"algorithm.gdpo_reward_keys {keys}; give one per key")


# verl's newer places of settings reinforge reads elsewhere: (verl's key, reinforge's key); a newer key set away from
# verl's default sets reinforge's (`adopt_newer_places`), and critic.fsdp.<name> is critic.model.fsdp_config.<name>
NEWER_PLACES = (
    ("reward.custom_reward_function.path", "custom_reward_function.path"),
    ("reward.custom_reward_function.name", "custom_reward_function.name"),
    ("reward.reward_manager.name", "reward_model.reward_manager"),
    ("reward.reward_kwargs", "reward_model.reward_kwargs"),
    ("reward.reward_model.enable", "reward_model.enable"),
    ("reward.reward_model.model_path", "reward_model.model.path"),
    ("reward_model.model_path", "reward_model.model.path"),
    ("reward.sandbox_fusion.url", "reward_model.sandbox_fusion.url"),
    ("reward.sandbox_fusion.max_concurrent", "reward_model.sandbox_fusion.max_concurrent"),
    ("reward.sandbox_fusion.memory_limit_mb", "reward_model.sandbox_fusion.memory_limit_mb"),
    ("reward_manager.name", "reward_model.reward_manager"),
    ("sandbox_fusion.url", "reward_model.sandbox_fusion.url"),
    ("sandbox_fusion.max_concurrent", "reward_model.sandbox_fusion.max_concurrent"),
    ("sandbox_fusion.memory_limit_mb", "reward_model.sandbox_fusion.memory_limit_mb"),
)
# keys verl's configs leave at null to mean "not given": its legacy reward keys (all null in its newest ppo_trainer.yaml,
# legacy_reward_impl.yaml: the reward section decides) and the defaults below; a null here (a command line or a config
# file from that verl) keeps reinforge's default
NULL_MEANS_DEFAULT = frozenset({
    *(f"reward_model.{name}" for name in ("num_workers", "reward_manager", "enable", "enable_resource_pool", "n_gpus_per_node",
                                          "nnodes", "model.path", "model.external_lib", "model.trust_remote_code")),
    "custom_reward_function.path", "custom_reward_function.name",
    # null in some verl versions' defaults, meaning the default: newest verl's filter metric, older verl's cosine floors
    "algorithm.filter_groups.metric", "actor_rollout_ref.actor.optim.min_lr_ratio", "critic.optim.min_lr_ratio",
})
# newer verl settings with no counterpart here that would change what is trained: (key, verl's defaults, what it does)
NOT_SUPPORTED = (
    ("reward.compute_score_kwargs", ({},), "passing keyword arguments to the built-in scorers"),
    ("reward.reward_manager.source", ("register",), "a reward manager class from a module"),
    ("reward.reward_manager.module.path", (None,), "a reward manager class from a module"),
    ("reward_manager.source", ("register",), "a reward manager class from a module"),
    ("reward_manager.module.path", (None,), "a reward manager class from a module"),
    ("reward_model.reward_loop_source", ("register", None), "a reward loop manager class from a module"),
    ("reward_model.reward_loop_module_path", (None,), "a reward loop manager class from a module"),
    ("reward_model.reward_loop_class_name", (None,), "a reward loop manager class from a module"),
    ("critic.model.lora_adapter_path", (None,), "starting the critic's LoRA adapters from a saved adapter"),
)


# verl's newer place of rollout.update_weights_bucket_megabytes: a key inside a free-form mapping, adopted on its own
CHECKPOINT_ENGINE_BUCKET = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"


def _show(setting) -> str:
    """A setting as the command line writes it."""
    return "null" if setting is None else str(setting).lower() if isinstance(setting, bool) else str(setting)


def adopt_newer_places(config: Config) -> list[tuple[str, str]]:
    """verl's newest ppo_trainer.yaml moved settings reinforge reads at their earlier keys (the reward section, the
    top-level reward_manager and sandbox_fusion, critic.fsdp.*, rollout.checkpoint_engine's bucket size): a newer key
    set away from verl's default sets the earlier one, so verl's current example command lines run as they are; the two
    set to different values is an error naming both. Returns the (newer, earlier) keys it took a value from."""
    from reinforge.config.fields import node_at

    defaults = Config()
    adopted = []

    def adopt(newer: str, ours: str, given) -> None:
        current = node_at(config, ours)
        if current not in (node_at(defaults, ours), given):
            raise ConfigError(f"{newer}={_show(given)} and {ours}={_show(current)} are the same setting (verl's newer and "
                              "earlier place of it) with two values; set one of them")
        section, _, name = ours.rpartition(".")
        setattr(node_at(config, section), name, given)
        adopted.append((newer, ours))

    pairs = [*NEWER_PLACES, *((f"critic.fsdp.{field.name}", f"critic.model.fsdp_config.{field.name}")
                              for field in dataclasses.fields(FSDPConfig))]
    for newer, ours in pairs:
        if node_at(config, newer) != node_at(defaults, newer):
            adopt(newer, ours, node_at(config, newer))
    bucket = config.actor_rollout_ref.rollout.checkpoint_engine.get(CHECKPOINT_ENGINE_BUCKET.rpartition(".")[2])
    if bucket is not None:  # verl's default there is 2048
        adopt(CHECKPOINT_ENGINE_BUCKET, "actor_rollout_ref.rollout.update_weights_bucket_megabytes", bucket)
    return adopted


def check_newer_verl_layout(config: Config) -> None:
    """Newer verl features that change what is trained (NOT_SUPPORTED, verl's newer rollout skip): each is accepted at
    verl's default only, and an error names the key to use where there is one."""
    from reinforge.config.fields import node_at

    critic = config.critic.enable
    for key, allowed, what in NOT_SUPPORTED:
        if node_at(config, key) not in allowed and (critic or not key.startswith("critic.")):
            _refuse(key, _show(node_at(config, key)), what, _show(allowed[0]))
    if config.skip.rollout.enable:
        raise ConfigError("skip.rollout.enable=true: verl's newer rollout skip (listed steps) is not supported in this "
                          "version; use actor_rollout_ref.rollout.skip.enable=true with skip.dump_dir, max_dump_step and "
                          "action (verl's earlier rollout skip, docs/observability.md)")
    mode = config.trainer.v1.get("trainer_mode", "sync")
    if mode != "sync":
        _refuse("trainer.v1.trainer_mode", mode, "an asynchronous trainer (rollouts of older policies)", "sync")
    for section in ("actor_rollout_ref.model", *(("critic.model",) if critic else ())):
        rank = (node_at(config, section).lora or {}).get("rank", 0)
        if rank:
            raise ConfigError(f"{section}.lora.rank={rank}: verl's LoRA settings of its Megatron backend; reinforge's LoRA "
                              f"is {section}.lora_rank (with lora_alpha, target_modules): set {section}.lora_rank={rank}")
    if critic and (config.critic.model.mtp or {}).get("enable_train"):
        _refuse("critic.model.mtp.enable_train", "true", "training multi-token-prediction layers", "false")
    if critic and (config.critic.fsdp.qat or {}).get("enable"):
        _refuse("critic.fsdp.qat.enable", "true", "quantization-aware training", "false")
    from reinforge.training.optim import WSD_STABLE_RATIO

    for key in ("actor_rollout_ref.actor.optim", *(("critic.optim",) if critic else ())):
        optim = node_at(config, key)
        if optim.lr_scheduler_type == "wsd" and optim.lr_wsd_stable_steps_ratio != WSD_STABLE_RATIO:
            _refuse(f"{key}.lr_wsd_stable_steps_ratio", optim.lr_wsd_stable_steps_ratio,
                    "another constant part of the wsd schedule than 0.9 of the steps after warmup", WSD_STABLE_RATIO)
