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

ADV_ESTIMATOR_REGISTRY: dict[str, Callable] = {}
ADV_ESTIMATORS_NEEDING_CRITIC = ("gae",)


def register_adv_est(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `algorithm.adv_estimator=<name>`."""

    def decorator(fn: Callable) -> Callable:
        existing = ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and existing is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered ({existing.__module__}.{existing.__name__})")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name: str) -> Callable:
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ValueError(f"unknown advantage estimator {name!r}; registered: {', '.join(adv_estimator_names())}")
    return ADV_ESTIMATOR_REGISTRY[name]


def adv_estimator_names() -> list[str]:
    return sorted(ADV_ESTIMATOR_REGISTRY)


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
