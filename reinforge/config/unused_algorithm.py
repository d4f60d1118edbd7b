"""Why an algorithm, distillation or rollout-correction setting has no effect in a run (config/unused.py lists them)."""

from __future__ import annotations

from reinforge.config.distillation_schema import TOPK_MODE
from reinforge.config.schema import Config


def lone_groups(config: Config) -> list[str]:
    """A line when a built-in estimator that compares each prompt's responses gets one response per prompt."""
    from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY
    estimator = config.algorithm.adv_estimator
    if (config.actor_rollout_ref.rollout.n > 1 or estimator == "reinforce_plus_plus_baseline"  # it also whitens over the batch
            or ADV_ESTIMATOR_REGISTRY.is_users(estimator) or not ADV_ESTIMATOR_REGISTRY.takes(estimator, "index")):
        return []
    what = ("every advantage is 0, so nothing is learned" if estimator == "rloo_vectorized"
            else "no baseline: each response's advantage is its own score (as in verl)")
    return [f"algorithm.adv_estimator={estimator} compares the responses to each prompt, and actor_rollout_ref.rollout.n=1 "
            f"gives each prompt one response: {what}. Set rollout.n >= 2 (TRL's num_generations)"]


_LOSS_KEYS = {  # actor keys that only some built-in policy losses read: key -> those losses
    **dict.fromkeys(("clip_ratio_low", "clip_ratio_high"),
                    ("vanilla", "gspo", "clip_cov", "geo_mean", "cispo", "up", "dppo_tv", "dppo_kl")),
    "clip_ratio": ("vanilla", "gspo", "clip_cov", "geo_mean", "cispo", "up", "dppo_tv", "dppo_kl", "cppo"),
    "clip_ratio_c": ("vanilla", "up", "dppo_tv", "dppo_kl", "cppo"),
    **dict.fromkeys(("policy_loss.topr_negative_ratio_lower", "policy_loss.topr_negative_ratio_upper"), ("topr",)),
    **dict.fromkeys((f"policy_loss.cppo.{name}" for name in ("cppo_w_min", "cppo_delta_b", "cppo_delta_b_q", "cppo_delta_b_k")),
                    ("cppo",)),
    **dict.fromkeys(("tau_pos", "tau_neg"), ("sapo",)),
    **dict.fromkeys(("policy_loss.clip_cov_ratio", "policy_loss.clip_cov_lb", "policy_loss.clip_cov_ub"), ("clip_cov",)),
    **dict.fromkeys(("policy_loss.kl_cov_ratio", "policy_loss.ppo_kl_coef"), ("kl_cov",)),
    "policy_loss.dro_beta": ("dro",),
}
_ESTIMATOR_ARGUMENTS = ("gamma", "lam", "norm_adv_by_std_in_grpo")  # algorithm keys passed to the estimator as arguments


def algorithm_reason(config: Config, key: str) -> str | None:
    """Why a KL, loss, estimator or dynamic-sampling key does nothing with the algorithm as configured, or None."""
    from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY, needs_critic
    from reinforge.algorithm.policy_loss import POLICY_LOSS_REGISTRY

    actor, algo = config.actor_rollout_ref.actor, config.algorithm
    if key in ("actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.kl_loss_type") and not actor.use_kl_loss:
        return "acts only with actor_rollout_ref.actor.use_kl_loss=true"
    if key.startswith(("algorithm.kl_ctrl.", "algorithm.kl_penalty")) and not algo.use_kl_in_reward:
        return "acts only with algorithm.use_kl_in_reward=true (the KL penalty in the reward)"
    if key.startswith("algorithm.filter_groups.") and key != "algorithm.filter_groups.enable" and not algo.filter_groups.enable:
        return "acts only with algorithm.filter_groups.enable=true"
    if key in ("algorithm.gdpo_reward_keys", "algorithm.gdpo_reward_weights") and algo.adv_estimator != "gdpo":
        return f"read by adv_estimator=gdpo only (this run: {algo.adv_estimator})"
    if key.startswith("algorithm.pf_ppo.") and not algo.use_pf_ppo:
        return "acts only with algorithm.use_pf_ppo=true"
    if (key == "algorithm.use_pf_ppo" or key.startswith("algorithm.pf_ppo.")) and algo.use_pf_ppo and not needs_critic(algo.adv_estimator):
        return (f"PF-PPO redraws the batch after an estimator that uses the critic's values (gae); "
                f"algorithm.adv_estimator={algo.adv_estimator} does not (verl ignores it there too)")
    name, estimator = key.removeprefix("algorithm."), algo.adv_estimator
    reads_config = ADV_ESTIMATOR_REGISTRY.is_users(estimator) and ADV_ESTIMATOR_REGISTRY.accepts(estimator, "config")
    if name in _ESTIMATOR_ARGUMENTS and not reads_config and not ADV_ESTIMATOR_REGISTRY.accepts(estimator, name):
        return f"algorithm.adv_estimator={estimator} does not use it"
    name, loss = key.removeprefix("actor_rollout_ref.actor."), actor.policy_loss.loss_mode
    if name in _LOSS_KEYS and loss in POLICY_LOSS_REGISTRY and not POLICY_LOSS_REGISTRY.is_users(loss) and loss not in _LOSS_KEYS[name]:
        return f"policy_loss.loss_mode={loss} does not use it (read by {', '.join(_LOSS_KEYS[name])})"
    if (key == "actor_rollout_ref.actor.clip_ratio" and loss != "cppo"  # cppo's threshold delta
            and actor.clip_ratio not in (actor.clip_ratio_low, actor.clip_ratio_high)):
        return (f"the clip range is clip_ratio_low={actor.clip_ratio_low} and clip_ratio_high={actor.clip_ratio_high} (verl's "
                "defaults 0.2 each); as in verl, clip_ratio stands in only for one of them set to null: set those instead")
    return None


def distillation_reason(config: Config, key: str) -> str | None:
    """Why a distillation.* key does nothing in this run, if it does not."""
    parts, distill = key.split("."), config.distillation
    if parts[0] != "distillation" or key == "distillation.enabled":
        return None
    if not distill.enabled:
        return "acts only with distillation.enabled=true"
    loss, name = distill.distillation_loss, parts[-1]
    if parts[1] in ("n_gpus_per_node", "nnodes") or (parts[1] == "teacher_models" and parts[3:4] in (["num_replicas"], ["inference"])):
        return "teachers are models in the training processes, as the reference is, not inference servers of their own"
    if name in ("use_chunked_topk", "chunked_topk_chunk_size"):
        return "the student's top-k log-probs never make a log-softmax copy of the vocabulary"
    if parts[1] == "distillation_loss" and name in ("policy_loss_mode", "clip_ratio", "clip_ratio_low", "clip_ratio_high") \
            and not loss.use_policy_gradient:
        return "acts only with distillation.distillation_loss.use_policy_gradient=true"
    if name in ("topk", "log_prob_min_clamp") and parts[1] == "distillation_loss" and loss.loss_mode != TOPK_MODE:
        return f"read by loss_mode={TOPK_MODE} only"
    if name == "distillation_loss_coef" and not loss.use_task_rewards:
        return "with use_task_rewards=false the distillation loss is the whole loss"
    if (key == "distillation.teacher_key" or (parts[1] == "teacher_models" and name == "key")) and len(distill.teacher_models) < 2:
        return "one teacher teaches every row"
    return None


def rollout_correction_reason(corr, name: str) -> str | None:
    """Why an algorithm.rollout_correction key does nothing with the others as set, or None."""
    if name in ("rollout_is_threshold", "rollout_is_batch_normalize") and corr.rollout_is is None:
        return "algorithm.rollout_correction.rollout_is is null (no importance weights)"
    if name == "rollout_rs_threshold" and corr.rollout_rs is None:
        return "algorithm.rollout_correction.rollout_rs is null (no rejection)"
    if name in ("loss_type", "debug_rollout_actor_probs") and not corr.bypass_mode:
        return "acts only with algorithm.rollout_correction.bypass_mode=true"
    return None
