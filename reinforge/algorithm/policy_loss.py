"""Policy losses, registered by name (`actor_rollout_ref.actor.policy_loss.loss_mode`).

A loss is a pure function `(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config) -> (loss, metrics)`; all tensors are (batch, response_len), `config` is the actor config
(clip ratios, policy_loss parameters) and `metrics` maps verl's metric names to floats.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reinforge.algorithm.core import agg_loss, masked_mean
from reinforge.algorithm.registry import Registry

POLICY_LOSS_REGISTRY = Registry("policy loss")


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `policy_loss.loss_mode=<name>`."""
    return POLICY_LOSS_REGISTRY.register(name)


def get_policy_loss_fn(name: str) -> Callable:
    return POLICY_LOSS_REGISTRY.get(name)


def policy_loss_names() -> list[str]:
    return POLICY_LOSS_REGISTRY.names()


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config=None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (arXiv:1707.06347) with asymmetric clipping and dual-clip.

    ratio = exp(log_prob - old_log_prob) is clipped to [1 - clip_ratio_low, 1 + clip_ratio_high];
    for negative advantages the loss is also capped at -A * clip_ratio_c (dual-clip,
    arXiv:1912.09729), so a very large ratio cannot dominate the update.
    """
    clip_ratio = getattr(config, "clip_ratio", 0.2)
    clip_low = getattr(config, "clip_ratio_low", None)
    clip_high = getattr(config, "clip_ratio_high", None)
    clip_low = clip_ratio if clip_low is None else clip_low
    clip_high = clip_ratio if clip_high is None else clip_high
    clip_c = getattr(config, "clip_ratio_c", 3.0)

    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    ppo_kl = masked_mean(-log_ratio, response_mask)

    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), response_mask)

    loss_dual_cap = -advantages * clip_c
    loss_dual = torch.minimum(loss_ppo, loss_dual_cap)
    clipfrac_lower = masked_mean(((loss_ppo > loss_dual_cap) & (advantages < 0)).float(), response_mask)

    token_losses = torch.where(advantages < 0, loss_dual, loss_ppo)
    loss = agg_loss(token_losses, response_mask, loss_agg_mode)
    metrics = {
        "actor/pg_clipfrac": clipfrac.item(),
        "actor/ppo_kl": ppo_kl.item(),
        "actor/pg_clipfrac_lower": clipfrac_lower.item(),
    }
    return loss, metrics
