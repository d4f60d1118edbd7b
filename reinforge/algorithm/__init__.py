"""ALGORITHM: advantage estimators, policy losses, KL estimators, loss aggregation, value loss.

Pure functions of tensors, looked up by name from registries; the trainer never branches on an
algorithm's name. Register your own with `@register_adv_est("name")` or
`@register_policy_loss("name")`, in a module named by `algorithm.custom_modules`.
docs/algorithms.md has every name with its formula, keys and paper.
"""

from reinforge.algorithm.advantage import (
    adv_estimator_names,
    compute_advantage,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    get_adv_estimator_fn,
    needs_critic,
    needs_old_log_probs,
    needs_reward_baselines,
    needs_sum_pi_squared,
    register_adv_est,
)
from reinforge.algorithm.core import (
    LOSS_AGG_MODES,
    agg_loss,
    batch_entropy,
    compute_value_loss,
    masked_mean,
    masked_whiten,
)
from reinforge.algorithm.custom import import_custom_modules
from reinforge.algorithm.filter import PF_PPO_METHODS, keep_groups, pf_ppo_resample
from reinforge.algorithm.kl import (
    KL_PENALTIES,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    full_kl,
    kl_penalty,
    make_kl_controller,
)
from reinforge.algorithm.logprob import compute_entropy, full_kl_from_logits, log_probs_from_logits, sum_pi_squared_from_logits
from reinforge.algorithm.policy_loss import (
    compute_policy_loss,
    compute_policy_loss_vanilla,
    get_policy_loss_fn,
    policy_loss_names,
    register_policy_loss,
)

__all__ = [
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "PF_PPO_METHODS",
    "AdaptiveKLController",
    "FixedKLController",
    "adv_estimator_names",
    "agg_loss",
    "batch_entropy",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_entropy",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_policy_loss_vanilla",
    "compute_value_loss",
    "full_kl",
    "full_kl_from_logits",
    "get_adv_estimator_fn",
    "get_policy_loss_fn",
    "import_custom_modules",
    "keep_groups",
    "kl_penalty",
    "log_probs_from_logits",
    "make_kl_controller",
    "masked_mean",
    "masked_whiten",
    "needs_critic",
    "needs_old_log_probs",
    "needs_reward_baselines",
    "needs_sum_pi_squared",
    "pf_ppo_resample",
    "policy_loss_names",
    "register_adv_est",
    "register_policy_loss",
    "sum_pi_squared_from_logits",
]
