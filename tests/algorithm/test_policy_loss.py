from types import SimpleNamespace

import pytest
import torch

from reinforge.algorithm import agg_loss, compute_entropy, get_policy_loss_fn, kl_penalty
from reinforge.algorithm.kl import AdaptiveKLController, FixedKLController, apply_kl_penalty

CFG = SimpleNamespace(clip_ratio_low=0.2, clip_ratio_high=0.3, clip_ratio_c=3.0)


def test_vanilla_clip_and_dual_clip_by_hand():
    ratio = torch.tensor([[0.5, 1.0, 1.5, 5.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0]])
    mask = torch.ones(1, 4)
    old = torch.zeros(1, 4)
    loss, metrics = get_policy_loss_fn("vanilla")(old, ratio.log(), adv, mask, "token-mean", CFG)
    # token 0: max(-0.5, -0.8) = -0.5; token 1: -1; token 2: max(-1.5, -1.3) = -1.3 (clipped high);
    # token 3 (A<0): max(5, 1.3) = 5, dual clip caps at 3
    assert loss.item() == pytest.approx((-0.5 - 1.0 - 1.3 + 3.0) / 4)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 4)  # only token 2 is clipped
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 4)
    expected_kl = -(ratio.log()).mean().item()
    assert metrics["actor/ppo_kl"] == pytest.approx(expected_kl)


def test_vanilla_on_policy_gradient_is_minus_advantage():
    log_prob = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[2.0, -1.0]])
    loss, _ = get_policy_loss_fn("vanilla")(log_prob.detach(), log_prob, adv, torch.ones(1, 2), "token-mean", CFG)
    loss.backward()
    assert torch.allclose(log_prob.grad, -adv / 2)


def test_agg_loss_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 4) / 2 / 3)  # seq-mean, / width 3
    assert agg_loss(loss, mask, "token-sum").item() == pytest.approx(10)


def test_kl_estimators_by_hand():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    assert kl_penalty(lp, ref, "kl").item() == pytest.approx(0.5)
    assert kl_penalty(lp, ref, "abs").item() == pytest.approx(0.5)
    assert kl_penalty(lp, ref, "mse").item() == pytest.approx(0.125)
    import math
    assert kl_penalty(lp, ref, "low_var_kl").item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    with pytest.raises(ValueError, match="known"):
        kl_penalty(lp, ref, "nope")


def test_entropy_matches_definition():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    p = torch.softmax(logits, -1)
    assert compute_entropy(logits).item() == pytest.approx(-(p * p.log()).sum().item(), rel=1e-6)


def test_kl_in_reward_and_controllers():
    scores = torch.tensor([[0.0, 1.0]])
    kld = kl_penalty(torch.tensor([[-1.0, -1.0]]), torch.tensor([[-2.0, -1.5]]), "kl")
    rewards, metrics = apply_kl_penalty(scores, kld, torch.ones(1, 2), FixedKLController(0.1))
    assert torch.allclose(rewards, torch.tensor([[-0.1, 0.95]]))
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.75)
    ctrl = AdaptiveKLController(0.1, target_kl=1.0, horizon=10)
    ctrl.update(current_kl=2.0, n_steps=5)  # error clipped to 0.2: 0.1 * (1 + 0.2 * 5 / 10)
    assert ctrl.value == pytest.approx(0.11)


def test_kl_in_reward_metric_ignores_nan_where_masked():
    # a NaN log-prob at a padded position (mask 0) must not reach the metric or the adaptive coefficient:
    # KL on the two valid tokens: (-1 - -1.5) = 0.5 and 0 -> mean 0.25
    kld = kl_penalty(torch.tensor([[-1.0, -1.0, 0.0]]), torch.tensor([[-1.5, -1.0, float("nan")]]), "kl")
    ctrl = AdaptiveKLController(0.1, target_kl=0.1, horizon=100)
    _, metrics = apply_kl_penalty(torch.zeros(1, 3), kld, torch.tensor([[1.0, 1.0, 0.0]]), ctrl)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.25)
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 1 / 100))  # error (0.25 / 0.1 - 1) clipped to 0.2, one row


def test_zero_lower_clip_is_respected_not_replaced_by_clip_ratio():
    cfg = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.0, clip_ratio_high=0.2, clip_ratio_c=3.0)
    ratio = torch.tensor([[0.905]])
    loss, metrics = get_policy_loss_fn("vanilla")(torch.zeros(1, 1), ratio.log(), torch.tensor([[-1.0]]), torch.ones(1, 1),
                                                  "token-mean", cfg)
    assert loss.item() == pytest.approx(1.0)  # max(0.905, clip(0.905, 1, 1.2) = 1.0)
    assert metrics["actor/pg_clipfrac"] == 1.0
