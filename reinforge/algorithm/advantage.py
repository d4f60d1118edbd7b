"""Advantage estimators, registered by name (`algorithm.adv_estimator`).

An estimator is a pure function of tensors called with verl's keyword arguments
(`token_level_rewards`, `response_mask`, `index`, `values`, `reward_baselines`, `gamma`, `lam`,
`norm_adv_by_std_in_grpo`, `config`); it receives the ones its signature names and returns
`(advantages, returns)`, each (batch, response_len) and zero on masked positions.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch

from reinforge.algorithm.registry import Registry

ADV_ESTIMATOR_REGISTRY = Registry("advantage estimator")
ADV_ESTIMATORS_NEEDING_CRITIC = ("gae",)


def register_adv_est(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `algorithm.adv_estimator=<name>`."""
    return ADV_ESTIMATOR_REGISTRY.register(name)


def get_adv_estimator_fn(name: str) -> Callable:
    return ADV_ESTIMATOR_REGISTRY.get(name)


def adv_estimator_names() -> list[str]:
    return ADV_ESTIMATOR_REGISTRY.names()


def compute_advantage(name: str, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Call estimator `name` with the keyword arguments its signature accepts."""
    fn = get_adv_estimator_fn(name)
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(**kwargs)


@register_adv_est("grpo")
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (arXiv:2402.03300): a response's score minus its group's mean, over the group's std.

    The score is the sum of the token rewards; responses sharing `index` (the prompt's uid) form a
    group; std is the unbiased sample std. A group of one gets mean 0 and std 1, so its advantage is
    its raw score. `norm_adv_by_std_in_grpo=False` skips the division (Dr. GRPO, arXiv:2503.20783).
    """
    scores = token_level_rewards.sum(dim=-1)
    groups: dict[object, list[int]] = defaultdict(list)
    for row, uid in enumerate(index):
        groups[uid].append(row)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    for rows in groups.values():
        if len(rows) > 1:
            group = scores[rows]
            mean[rows] = group.mean()
            std[rows] = group.std()
    advantages = scores - mean
    if norm_adv_by_std_in_grpo:
        advantages = advantages / (std + epsilon)
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages
