"""KL estimators between the actor and the reference, and the in-reward KL coefficient.

Estimators of KL(actor || ref) from per-token log-probs of sampled tokens
(http://joschu.net/blog/kl-approx.html): `kl`/`k1` = log p - log q; `abs`; `mse`/`k2` =
0.5 (log p - log q)^2; `low_var_kl`/`k3` = q/p - log(q/p) - 1, clamped to [-10, 10] as verl does.
"""

from __future__ import annotations

import torch

KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate (same shape as the inputs)."""
    if kl_penalty in ("kl", "k1"):
        return log_prob - ref_log_prob
    if kl_penalty == "abs":
        return (log_prob - ref_log_prob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (log_prob - ref_log_prob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        log_ratio = (ref_log_prob - log_prob).clamp(-20, 20)
        return (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"unknown kl_penalty {kl_penalty!r}; known: {', '.join(KL_PENALTIES)}")


class FixedKLController:
    """A constant coefficient."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


class AdaptiveKLController:
    """Adjusts the coefficient towards a target KL (Ziegler et al. 2019, arXiv:1909.08593)."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        self.value, self.target, self.horizon = init_kl_coef, target_kl, horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def make_kl_controller(kl_ctrl) -> FixedKLController | AdaptiveKLController:
    if kl_ctrl.type == "fixed":
        return FixedKLController(kl_ctrl.kl_coef)
    if kl_ctrl.type == "adaptive":
        return AdaptiveKLController(kl_ctrl.kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon)
    raise ValueError(f"unknown kl_ctrl.type {kl_ctrl.type!r}")


def apply_kl_penalty(token_level_scores: torch.Tensor, log_prob: torch.Tensor, ref_log_prob: torch.Tensor,
                     response_mask: torch.Tensor, kl_ctrl, kl_type: str) -> tuple[torch.Tensor, dict[str, float]]:
    """Rewards = scores - beta * KL per token (algorithm.use_kl_in_reward); updates the controller."""
    kld = kl_penalty(log_prob, ref_log_prob, kl_type) * response_mask
    beta = kl_ctrl.value
    rewards = token_level_scores - beta * kld
    current_kl = ((kld.sum(-1) / response_mask.sum(-1).clamp(min=1)).mean()).item()
    kl_ctrl.update(current_kl, n_steps=token_level_scores.shape[0])
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
