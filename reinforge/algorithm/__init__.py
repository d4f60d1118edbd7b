"""ALGORITHM: advantage estimators, policy losses, KL estimators and loss aggregation.

Pure functions of tensors, looked up by name from registries; the trainer never branches on an
algorithm's name. Register your own with `@register_adv_est("name")` or
`@register_policy_loss("name")`.
"""

from reinforge.algorithm.advantage import (
    ADV_ESTIMATORS_NEEDING_CRITIC,
    adv_estimator_names,
    compute_advantage,
    compute_grpo_outcome_advantage,
    get_adv_estimator_fn,
    register_adv_est,
)
from reinforge.algorithm.core import agg_loss, agg_scale, compute_entropy, masked_mean
from reinforge.algorithm.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_penalty,
    make_kl_controller,
)
from reinforge.algorithm.policy_loss import (
    compute_policy_loss_vanilla,
    get_policy_loss_fn,
    policy_loss_names,
    register_policy_loss,
)

__all__ = [
    "ADV_ESTIMATORS_NEEDING_CRITIC",
    "AdaptiveKLController",
    "FixedKLController",
    "adv_estimator_names",
    "agg_loss",
    "apply_kl_penalty",
    "agg_scale",
    "compute_advantage",
    "compute_entropy",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss_vanilla",
    "get_adv_estimator_fn",
    "get_policy_loss_fn",
    "kl_penalty",
    "make_kl_controller",
    "masked_mean",
    "policy_loss_names",
    "register_adv_est",
    "register_policy_loss",
]
