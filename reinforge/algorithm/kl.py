"""KL estimators between the actor and the reference, and the in-reward KL coefficient.

Estimators of KL(actor || ref) per token from log-probs of the sampled token, x = log p - log q
(http://joschu.net/blog/kl-approx.html): `kl`/`k1` = x; `abs` = |x|; `mse`/`k2` = x^2 / 2;
`low_var_kl`/`k3` = exp(-x) + x - 1 (with -x clamped to [-20, 20] and the result to [-10, 10],
as verl does). A `+` suffix (`k3+`, `kl+`, `abs+`, ...) keeps the named estimator's value but
takes the gradient of k2, which is the gradient of the true KL (straight-through). `full` is
the exact KL over the vocabulary; its inputs are whole log-softmax rows (..., vocab).
"""

from __future__ import annotations

import torch

from reinforge.algorithm.core import masked_mean

SAMPLED_KL = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_PENALTIES = (*SAMPLED_KL, "full", *(f"{name}+" for name in SAMPLED_KL))  # k2+ and mse+: k2 itself, as in verl


def _sampled_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("kl", "k1"):
        return log_prob - ref_log_prob
    if kind == "abs":
        return (log_prob - ref_log_prob).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (log_prob - ref_log_prob).square()
    if kind in ("low_var_kl", "k3"):
        log_ratio = (ref_log_prob - log_prob).clamp(-20, 20)
        return (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"unknown kl_penalty {kind!r}; known: {', '.join(KL_PENALTIES)}")


def full_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Exact KL(p || q) = sum_v p(v) (log p(v) - log q(v)) from log-softmax rows (..., vocab)."""
    return (log_probs.exp() * (log_probs - ref_log_probs)).sum(-1)


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate, same shape as the inputs (for `full`: without the vocabulary dim)."""
    if kl_penalty == "full":
        return full_kl(log_prob, ref_log_prob)
    if not kl_penalty.endswith("+") or kl_penalty in ("mse+", "k2+"):
        return _sampled_kl(log_prob, ref_log_prob, kl_penalty.rstrip("+"))
    value = _sampled_kl(log_prob, ref_log_prob, kl_penalty[:-1])
    k2 = 0.5 * (log_prob - ref_log_prob).square()
    return k2 - k2.detach() + value.detach()


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


class AdaptiveKLController(FixedKLController):
    """Adjusts the coefficient towards a target KL (Ziegler et al. 2019, arXiv:1909.08593)."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        super().__init__(init_kl_coef)
        self.target, self.horizon = target_kl, horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon


def make_kl_controller(kl_ctrl) -> FixedKLController:
    if kl_ctrl.type == "fixed":
        return FixedKLController(kl_ctrl.kl_coef)
    if kl_ctrl.type == "adaptive":
        return AdaptiveKLController(kl_ctrl.kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon)
    raise ValueError(f"unknown kl_ctrl.type {kl_ctrl.type!r}")


def apply_kl_penalty(token_level_scores: torch.Tensor, kld: torch.Tensor, response_mask: torch.Tensor,
                     kl_ctrl: FixedKLController) -> tuple[torch.Tensor, dict[str, float]]:
    """Rewards = scores - beta * KL per token (algorithm.use_kl_in_reward); then updates the controller.

    `kld` is the per-token KL estimate (batch, response_len); the controller sees its mean over
    sequences of the per-sequence token mean.
    """
    kld = kld * response_mask
    beta = kl_ctrl.value
    rewards = token_level_scores - beta * kld
    current_kl = masked_mean(kld, response_mask, -1).mean().item()  # a NaN or inf where masked counts 0, as in verl
    kl_ctrl.update(current_kl, n_steps=token_level_scores.shape[0])
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
