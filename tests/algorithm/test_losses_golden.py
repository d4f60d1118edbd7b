"""Golden numbers for every policy loss, worked out by hand from docs/algorithms.md (arithmetic next to them).

The properties checked on random batches against numpy loops (all losses, all modes, masked rows,
micro-batches) are in test_losses_properties.py.
"""

import math

import pytest
import torch
from loss_reference import ALL_LOSSES, CLIPFRAC, KL, LOWER, actor_cfg, call, grad_of, leaf

from reinforge.algorithm import get_policy_loss_fn, register_policy_loss
from reinforge.config.schema import ActorConfig
from reinforge.errors import ConfigError


# ------------------------------------------------------------------------------------------ vanilla
def vanilla_example():
    # (ratio, A) per token; row 0 = tokens 1-3 and a masked token, row 1 = tokens 4-6 and a masked token
    ratios = [[0.5, 1.5, 0.5, math.exp(50)], [5.0, 1.2, 1.1, math.exp(50)]]
    adv = torch.tensor([[1.0, 1.0, -1.0, 5.0], [-2.0, -1.0, 2.0, -7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    log_ratio = torch.tensor([[math.log(r) if r < 1e10 else 50.0 for r in row] for row in ratios])
    old = torch.full((2, 4), -2.0)
    lp = (old + log_ratio).clone().requires_grad_(True)
    return old, lp, adv, mask


def test_vanilla_asymmetric_and_dual_clip_by_hand():
    old, lp, adv, mask = vanilla_example()
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    loss, metrics = call("vanilla", old, lp, adv, mask, "token-mean", cfg)
    # clip range [0.8, 1.28]
    # t1 (0.5, +1): max(-0.5, -0.8) = -0.5
    # t2 (1.5, +1): max(-1.5, -1.28) = -1.28 (clipped)
    # t3 (0.5, -1): max(0.5, 0.8) = 0.8 (clipped), dual cap 3 not reached
    # t4 (5, -2): max(10, 2.56) = 10, dual clip min(6, 10) = 6 (lower)
    # t5 (1.2, -1): 1.2; t6 (1.1, +2): -2.2
    # sum = -0.5 - 1.28 + 0.8 + 6 + 1.2 - 2.2 = 4.02 -> / 6
    assert loss.item() == pytest.approx(4.02 / 6, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(2 / 6)
    assert metrics[LOWER] == pytest.approx(1 / 6)
    kl = -(math.log(0.5) + math.log(1.5) + math.log(0.5) + math.log(5) + math.log(1.2) + math.log(1.1)) / 6
    assert metrics[KL] == pytest.approx(kl, abs=1e-6)
    # gradient: unclipped tokens -A*ratio / 6, clipped and dual-clipped tokens 0, masked 0
    expected = torch.tensor([[-0.5, 0.0, 0.0, 0.0], [0.0, 1.2, -2.2, 0.0]]) / 6
    assert torch.allclose(grad_of(loss, lp), expected, atol=1e-6)


def test_vanilla_seq_mean_token_sum_by_hand():
    old, lp, adv, mask = vanilla_example()
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    loss, _ = call("vanilla", old, lp, adv, mask, "seq-mean-token-sum", cfg)
    # row sums: -0.5 - 1.28 + 0.8 = -0.98 and 6 + 1.2 - 2.2 = 5.0 -> mean 2.01
    assert loss.item() == pytest.approx(2.01, abs=1e-6)


def test_vanilla_clip_ratio_is_the_default_for_low_and_high():
    # clip_ratio 0.1 -> [0.9, 1.1]: (1.15, +1) -> -1.1; (0.85, -1) -> 0.9; (0.95, +1) -> -0.95
    cfg = actor_cfg(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=None, clip_ratio_c=3.0)
    lp = torch.log(torch.tensor([[1.15, 0.85, 0.95]]))
    loss, metrics = call("vanilla", torch.zeros(1, 3), lp, torch.tensor([[1.0, -1.0, 1.0]]), torch.ones(1, 3), "token-mean", cfg)
    assert loss.item() == pytest.approx((-1.1 + 0.9 - 0.95) / 3, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(2 / 3)


def test_vanilla_extreme_log_ratios_are_clamped_and_dual_clipped():
    # log-ratio [50, 50, -50, -50] clamps to +-20; A = [-1, 1, 1, -1], range [0.8, 1.2], c = 3
    # t0: max(e^20, 1.2) capped at 3 (lower); t1: max(-e^20, -1.2) = -1.2 (clipped)
    # t2: max(-e^-20, -0.8) = -e^-20; t3: max(e^-20, 0.8) = 0.8 (clipped)
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0)
    lp = leaf([[50.0, 50.0, -50.0, -50.0]])
    loss, metrics = call("vanilla", torch.zeros(1, 4), lp, torch.tensor([[-1.0, 1.0, 1.0, -1.0]]), torch.ones(1, 4),
                         "token-mean", cfg)
    assert loss.item() == pytest.approx((3 - 1.2 - math.exp(-20) + 0.8) / 4, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(0.5)
    assert metrics[LOWER] == pytest.approx(0.25)
    assert metrics[KL] == pytest.approx(0.0, abs=1e-6)  # -(20 + 20 - 20 - 20) / 4
    grad_of(loss, lp)


# --------------------------------------------------------------------------------------------- gspo
@pytest.mark.parametrize("mode,total,divisor", [("token-mean", -2.4, 3), ("seq-mean-token-sum", -2.4, 2),
                                                ("seq-mean-token-mean", -1.2, 2)])
def test_gspo_by_hand_in_each_aggregation(mode, total, divisor):
    # row 0: x = [0.1, 0.3] -> mean 0.2, s = e^0.2 = 1.2214 > 1.2, A = 1 -> both tokens -1.2 (clipped)
    # row 1: mask [1, 0], x = [-0.05, 9] -> s = e^-0.05 = 0.951229, A = -1 -> 0.951229 (unclipped)
    # aggregated by loss_agg_mode, as verl 0.6+: token-mean (-2.4 + s1) / 3 tokens; seq-mean-token-sum
    # (-2.4 + s1) / 2 rows; seq-mean-token-mean (-1.2 + s1) / 2 rows
    old = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    lp = (old + torch.tensor([[0.1, 0.3], [-0.05, 9.0]])).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss, metrics = call("gspo", old, lp, adv, mask, mode, cfg)
    s1 = math.exp(-0.05)
    assert loss.item() == pytest.approx((total + s1) / divisor, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(2 / 3)
    assert metrics[LOWER] == pytest.approx(0.0)
    assert metrics[KL] == pytest.approx(-(0.1 + 0.3 - 0.05) / 3, abs=1e-6)
    # d s_{i,t} / d logp_{i,t} = s_i (the sequence mean is detached); row 0 clipped; row 1 token 0: -A * s / divisor
    # (its row has one token, so seq-mean-token-mean's token mean divides by 1)
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[0.0, 0.0], [s1 / divisor, 0.0]]), atol=1e-6)


def test_gspo_sequence_log_ratio_is_capped_at_10():
    # x = [12, 12] -> mean 12, log s capped at 10; A = -1: max(e^10, 1.2) = e^10 per token
    lp = leaf([[10.0, 10.0]])
    loss, _ = call("gspo", torch.full((1, 2), -2.0), lp, torch.full((1, 2), -1.0), torch.ones(1, 2), "token-mean",
                   actor_cfg(clip_ratio_low=0.2, clip_ratio_high=0.2))
    assert loss.item() == pytest.approx(math.exp(10), rel=1e-6)


# --------------------------------------------------------------------------------------------- sapo
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_sapo_by_hand_with_extreme_ratios(mode):
    # tau_pos 1, tau_neg 1.05; gate = sigmoid(tau (rho - 1)) * 4 / tau; loss = -A gate
    # row 0: (x=0, A=1): gate 2 -> -2; (x=ln 1.5, A=-1): g1 = sigmoid(0.525) * 4/1.05 -> +g1; (x=0, A=0) -> 0
    # row 1: (x=50 -> 20, A=1): gate 4 -> -4; (x=-50 -> -20, A=-2): g2 = sigmoid(1.05 (e^-20 - 1)) * 4/1.05 -> 2 g2;
    #        masked (x=3, A=9)
    old = torch.full((2, 3), -1.0)
    x = torch.tensor([[0.0, math.log(1.5), 0.0], [50.0, -50.0, 3.0]])
    lp = (old + x).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 0.0], [1.0, -2.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    cfg = actor_cfg(tau_pos=1.0, tau_neg=1.05)
    loss, metrics = call("sapo", old, lp, adv, mask, mode, cfg)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    g1 = sig(0.525) * 4 / 1.05
    g2 = sig(1.05 * (math.exp(-20) - 1)) * 4 / 1.05
    expected = ((-2 + g1 + 0) / 3 + (-4 + 2 * g2) / 2) / 2
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(0.0)
    assert metrics[LOWER] == pytest.approx(0.0)
    assert metrics[KL] == pytest.approx(-math.log(1.5) / 5, abs=1e-6)  # -(0 + ln1.5 + 0 + 20 - 20) / 5
    # d(-A gate)/dlogp = -A * 4 sigmoid(z)(1 - sigmoid(z)) * rho; weight 1/3/2 in row 0
    g = grad_of(loss, lp)
    s = sig(0.525)
    assert g[0, 0].item() == pytest.approx(-1.0 / 6, abs=1e-6)
    assert g[0, 1].item() == pytest.approx(4 * s * (1 - s) * 1.5 / 6, abs=1e-6)
    assert g[0, 2].item() == pytest.approx(0.0, abs=1e-7)
    assert g[1, 2].item() == 0.0


def test_sapo_config_defaults():
    cfg = ActorConfig()
    assert cfg.tau_pos == 1.0 and cfg.tau_neg == 1.05


# ---------------------------------------------------------------------------------------------- gpg
@pytest.mark.parametrize(("mode", "expected"), [
    # token losses -logp*A: (1)(1) = 1, (2)(1) = 2 | (0.5)(-2) = -1; rows sum 3 and -1, lengths 2 and 1, width 3
    ("token-mean", 2 / 3),
    ("seq-mean-token-sum", (3 - 1) / 2),
    ("seq-mean-token-mean", (1.5 - 1) / 2),
    ("seq-mean-token-sum-norm", (3 - 1) / 2 / 3),
    ("token-sum", 2.0),
])
def test_gpg_loss_by_hand(mode, expected):
    lp = leaf([[-1.0, -2.0, -7.0], [-0.5, -3.0, -9.0]])
    adv = torch.tensor([[1.0, 1.0, 3.0], [-2.0, 4.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, _ = call("gpg", lp.detach() + 0.3, lp, adv, mask, mode, actor_cfg())
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    if mode == "token-mean":
        assert torch.allclose(grad_of(loss, lp), torch.tensor([[-1.0, -1.0, 0.0], [2.0, 0.0, 0.0]]) / 3, atol=1e-6)


# -------------------------------------------------------------------------------------------- cispo
def test_cispo_by_hand():
    # range [0.8, 1.28]; loss = -sg(clip(rho)) * A * logp
    # (1.5, A=1, lp=-1): -1.28*1*(-1) = 1.28; (0.5, A=-1, lp=-2): -0.8*(-1)*(-2) = -1.6
    # (1.0, A=2, lp=-0.5): 1; (x=50 -> e^20, A=1, lp=-0.1): 0.128; masked token (A=4)
    lp = leaf([[-1.0, -2.0, -0.5, -0.1, -3.0]])
    old = lp.detach() - torch.tensor([[math.log(1.5), math.log(0.5), 0.0, 50.0, 1.0]])
    adv = torch.tensor([[1.0, -1.0, 2.0, 1.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, metrics = call("cispo", old, lp, adv, mask, "token-mean", cfg)
    assert loss.item() == pytest.approx((1.28 - 1.6 + 1 + 0.128) / 4, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(3 / 4)
    assert metrics.get(LOWER, 0.0) == pytest.approx(0.0)
    # gradient -cr * A / 4 (the clipped ratio is a constant weight)
    expected = torch.tensor([[-1.28, 0.8, -2.0, -1.28, 0.0]]) / 4
    assert torch.allclose(grad_of(loss, lp), expected, atol=1e-6)


def test_cispo_with_verls_unclamped_lower_side_by_hand():
    # verl's CISPO example: clip_ratio_low=10 (range [-9, 1.2]: the ratio, always positive, is never raised)
    # (0.5, A=-1, lp=-2): -0.5*(-1)*(-2) = -1; (0.01, A=1, lp=-1): 0.01; (1.5, A=1, lp=-1): 1.2
    lp = leaf([[-2.0, -1.0, -1.0]])
    old = lp.detach() - torch.tensor([[math.log(0.5), math.log(0.01), math.log(1.5)]])
    adv, mask = torch.tensor([[-1.0, 1.0, 1.0]]), torch.ones(1, 3)
    loss, metrics = call("cispo", old, lp, adv, mask, "token-mean", actor_cfg(clip_ratio_low=10.0, clip_ratio_high=0.2))
    assert loss.item() == pytest.approx((-1.0 + 0.01 + 1.2) / 3, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(1 / 3)
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[0.5, -0.01, -1.2]]) / 3, atol=1e-6)


# --------------------------------------------------------------------------------------------- topr
def test_topr_by_hand():
    # row 0: log-ratios ln 0.5 twice -> sequence ratio 0.5, mean advantage -1 < 0 -> weight clamp(0.5, 0, 1) = 0.5
    #        token losses -A lp w: -(-1)(-1)(0.5) = -0.5, -(-1)(-2)(0.5) = -1.0 -> row mean -0.75
    # row 1: one token, ratio 3, A = 2 -> weight 1: -2 (-0.5) = 1.0 (a masked token beside it)
    # always seq-mean-token-mean: (-0.75 + 1.0) / 2 = 0.125, whatever loss_agg_mode says
    lp = leaf([[-1.0, -2.0], [-0.5, -4.0]])
    old = lp.detach() - torch.tensor([[math.log(0.5), math.log(0.5)], [math.log(3.0), 9.0]])
    adv, mask = torch.tensor([[-1.0, -1.0], [2.0, 5.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, metrics = call("topr", old, lp, adv, mask, "token-mean", actor_cfg())
    assert loss.item() == pytest.approx(0.125, abs=1e-6)
    assert metrics["actor/topr_negative_seq_frac"] == pytest.approx(0.5)
    assert metrics["actor/topr_taper_weight_mean"] == pytest.approx(0.75)
    # gradient -A w / (row tokens x 2 rows): 0.5 / 4 twice, -2 / 2, masked 0
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[0.125, 0.125], [-1.0, 0.0]]), atol=1e-6)


# --------------------------------------------------------------------------------------------- cppo
def test_cppo_by_hand():
    # width 3, w_min 0.5: position weights 1, 0.75, 0.5; p_old 0.5 each, p 0.6, 0.72, 0.3, all A = 1
    # |p - p_old| = 0.1, 0.22, 0.2 -> its 0.9-quantile 0.216, clamped to [0.02, 0.1]: budget b = 0.1; delta 0.15
    # t1: Z 0.1 <= min(0.15, 0.15) -> kept; t2: Z 0.165 > min(0.15, 0.15 + 0.1 x 1 - 0.1) and ratio 1.44 moves with A
    # -> dropped; t3: Z 0.1 > 0.15 + 0.1 x 1.75 - 0.265 = 0.06, but ratio 0.6 moves against A -> kept
    # losses -A min(ratio, 1.1) lp: t1 -1.1 ln 0.6, t3 -0.6 ln 0.3; token-mean over 3 tokens
    lp = leaf([[math.log(0.6), math.log(0.72), math.log(0.3)]])
    old, adv, mask = torch.full((1, 3), math.log(0.5)), torch.ones(1, 3), torch.ones(1, 3)
    cfg = actor_cfg(clip_ratio=0.15, clip_ratio_c=1.1)
    cfg.policy_loss.cppo.cppo_w_min = 0.5
    loss, metrics = call("cppo", old, lp, adv, mask, "token-mean", cfg)
    assert loss.item() == pytest.approx((-1.1 * math.log(0.6) - 0.6 * math.log(0.3)) / 3, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(1 / 3)
    assert metrics[LOWER] == pytest.approx(1 / 3)  # t1: ratio 1.2 kept and capped at 1.1
    assert metrics[KL] == pytest.approx(-(math.log(1.2) + math.log(1.44) + math.log(0.6)) / 3, abs=1e-6)
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[-1.1, 0.0, -0.6]]) / 3, atol=1e-6)


# ---------------------------------------------------------------------------------------------- dro
def test_dro_by_hand():
    # beta 0.5; loss = -(A lp - beta/2 x^2), x = lp - old
    # (x=0.4, A=1, lp=-1): -(-1 - 0.04) = 1.04; (x=-2, A=-1, lp=-2): -(2 - 1) = -1; (x=0, A=2, lp=-0.5): 1; masked
    lp = leaf([[-1.0, -2.0, -0.5, -3.0]])
    old = lp.detach() - torch.tensor([[0.4, -2.0, 0.0, 5.0]])
    adv = torch.tensor([[1.0, -1.0, 2.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    cfg = actor_cfg(policy_loss=dict(dro_beta=0.5))
    loss, metrics = call("dro", old, lp, adv, mask, "token-mean", cfg)
    assert loss.item() == pytest.approx((1.04 - 1.0 + 1.0) / 3, abs=1e-6)
    assert metrics[KL] == pytest.approx(-(0.4 - 2.0 + 0.0) / 3, abs=1e-6)
    assert metrics[CLIPFRAC] == 0.0 and metrics[LOWER] == 0.0
    # gradient (-A + beta x) / 3: (-1 + 0.2), (1 - 1), (-2 + 0), masked 0
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[-0.8, 0.0, -2.0, 0.0]]) / 3, atol=1e-6)


def test_dro_without_a_positive_beta_names_the_key():
    lp = leaf([[-1.0]])
    for beta in (None, 0.0):
        with pytest.raises(ConfigError, match=r"policy_loss.dro_beta=.* must be a positive number with policy_loss.loss_mode=dro"):
            call("dro", lp.detach(), lp, torch.ones(1, 1), torch.ones(1, 1), "token-mean", actor_cfg(policy_loss=dict(dro_beta=beta)))


# ----------------------------------------------------------------------------------------------- up
def test_up_gives_positive_advantages_the_unclipped_gradient_by_hand():
    # range [0.8, 1.2], dual clip 3; tokens (ratio, A): (1.5, +1) (0.5, -1) (5, -2) (1.1, -1), then a masked one
    # (1.5, +1): -A pi/sg(pi) = -1 in value, gradient -1 (vanilla would clip it: no gradient)
    # (0.5, -1): max(0.5, 0.8) = 0.8, clipped; (5, -2): max(10, 2.56) = 10, dual clip min(6, 10) = 6; (1.1, -1): 1.1
    lp = leaf([[-1.0, -2.0, -0.5, -0.3, -3.0]])
    old = lp.detach() - torch.tensor([[math.log(1.5), math.log(0.5), math.log(5.0), math.log(1.1), 1.0]])
    adv = torch.tensor([[1.0, -1.0, -2.0, -1.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    loss, metrics = call("up", old, lp, adv, mask, "token-mean", actor_cfg(clip_ratio=0.2, clip_ratio_c=3.0))
    assert loss.item() == pytest.approx((-1 + 0.8 + 6 + 1.1) / 4, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(1 / 4)  # the 0.5 one (A <= 0) is clipped, of the 4 tokens
    assert metrics[LOWER] == pytest.approx(1 / 4)
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[-1.0, 0.0, 0.0, 1.1, 0.0]]) / 4, atol=1e-6)


# --------------------------------------------------------------------------------------------- dppo
def dppo_example():
    # (p_old, p, A) per token, and a masked sixth; clip_ratio 0.2 is the divergence bound, clip_ratio_c 3 truncates
    p_old = [0.5, 0.2, 0.5, 0.5, 0.01, 0.1, 0.3]
    p = [0.6, 0.5, 0.25, 0.4, 0.1, 0.6, 0.9]
    adv = torch.tensor([[1.0, 1.0, -1.0, -2.0, 1.0, 1.0, 5.0]])
    lp = leaf([[math.log(v) for v in p]])
    old = torch.tensor([[math.log(v) for v in p_old]])
    mask = torch.tensor([[1.0] * 6 + [0.0]])
    return old, lp, adv, mask


def test_dppo_tv_by_hand():
    old, lp, adv, mask = dppo_example()
    loss, metrics = call("dppo_tv", old, lp, adv, mask, "token-mean", actor_cfg(clip_ratio=0.2, clip_ratio_c=3.0))
    # p - p_old: 0.1 in; 0.3 > 0.2 out; -0.25 < -0.2 out (A < 0); -0.1 in; 0.09 in (ratio 10, truncated to 3); 0.5 out
    # in: -A sg(min(ratio, 3)) log p: -1.2 log 0.6, -(-2)(0.8) log 0.4 = 1.6 log 0.4, -3 log 0.1
    expected = (-1.2 * math.log(0.6) + 1.6 * math.log(0.4) - 3 * math.log(0.1)) / 6
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(3 / 6) and metrics[LOWER] == pytest.approx(1 / 6)
    # the gradient in log p is -A min(ratio, 3) inside the region, 0 outside
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[-1.2, 0.0, 0.0, 1.6, -3.0, 0.0, 0.0]]) / 6, atol=1e-6)


def test_dppo_kl_by_hand():
    old, lp, adv, mask = dppo_example()
    loss, metrics = call("dppo_kl", old, lp, adv, mask, "token-mean", actor_cfg(clip_ratio=0.2, clip_ratio_c=3.0))

    def binary_kl(p_old, p):
        return p_old * math.log(p_old / p) + (1 - p_old) * math.log((1 - p_old) / (1 - p))

    # KL of "this token or not": 0.020, 0.193, 0.144, 0.020, 0.071 are within 0.2; (0.1 -> 0.6) 0.551 is not, and p rose
    assert binary_kl(0.2, 0.5) == pytest.approx(0.1927, abs=1e-4) and binary_kl(0.1, 0.6) == pytest.approx(0.5507, abs=1e-4)
    expected = (-1.2 * math.log(0.6) - 2.5 * math.log(0.5) + 0.5 * math.log(0.25) + 1.6 * math.log(0.4) - 3 * math.log(0.1)) / 6
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(1 / 6) and metrics[LOWER] == pytest.approx(1 / 6)
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[-1.2, -2.5, 0.5, 1.6, -3.0, 0.0, 0.0]]) / 6, atol=1e-6)


# ----------------------------------------------------------------------------------------- clip_cov
def clip_cov_example():
    # lp = [-1, -2, -3, -4 | masked -50], A = [2, 1, 0, -3 | masked 100]
    # masked means: A 0, logp -2.5 -> cov = [2*1.5, 1*0.5, 0*(-0.5), (-3)(-1.5)] = [3, 0.5, 0, 4.5]
    # ratios [1, 1, 1, 0.5]; token 3 (A=-3, rho 0.5): l1 = 1.5, l2 = 3*0.8 = 2.4 -> clipped by origin
    lp = leaf([[-1.0, -2.0, -3.0, -4.0, -50.0]])
    old = lp.detach() - torch.tensor([[0.0, 0.0, 0.0, math.log(0.5), 0.0]])
    adv = torch.tensor([[2.0, 1.0, 0.0, -3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    return old, lp, adv, mask


def test_clip_cov_exactly_one_eligible_token_by_hand():
    old, lp, adv, mask = clip_cov_example()
    # lb 1 < cov < ub 5 among unclipped valid tokens: only token 0 (cov 3) -> corr 0 there
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2,
                    policy_loss=dict(clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0))
    loss, metrics = call("clip_cov", old, lp, adv, mask, "token-mean", cfg)
    # token losses [0 (corr), -1, 0, 2.4] -> 1.4 / 4
    assert loss.item() == pytest.approx(0.35, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(0.25)
    assert metrics[KL] == pytest.approx(math.log(2) / 4, abs=1e-6)  # mean of -(logp - old) = -ln 0.5 / 4
    assert torch.allclose(grad_of(loss, lp), torch.tensor([[0.0, -0.25, 0.0, 0.0, 0.0]]), atol=1e-6)


def test_clip_cov_selects_every_eligible_token_when_ratio_is_large():
    old, lp, adv, mask = clip_cov_example()
    # bounds (-10, 10): tokens 0, 1, 2 are eligible (3 is clipped by origin); clip_num = 4 >= 3 -> all three
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2,
                    policy_loss=dict(clip_cov_ratio=1.0, clip_cov_lb=-10.0, clip_cov_ub=10.0))
    loss, metrics = call("clip_cov", old, lp, adv, mask, "token-mean", cfg)
    assert loss.item() == pytest.approx(2.4 / 4, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(0.75)
    assert torch.allclose(grad_of(loss, lp), torch.zeros(1, 5), atol=1e-7)


def test_clip_cov_no_eligible_token_is_plain_clip_without_dual_clip():
    # bounds (100, 200): nothing eligible. A = -2, rho 5: l1 = 10, l2 = 2.4 -> 10 (no dual-clip cap at 3*2 = 6)
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
                    policy_loss=dict(clip_cov_ratio=0.5, clip_cov_lb=100.0, clip_cov_ub=200.0))
    lp = leaf([[math.log(5.0), 0.0]])
    loss, metrics = call("clip_cov", torch.zeros(1, 2), lp, torch.tensor([[-2.0, 1.0]]), torch.ones(1, 2), "token-mean", cfg)
    assert loss.item() == pytest.approx((10 - 1) / 2, abs=1e-5)
    assert metrics[CLIPFRAC] == pytest.approx(0.0)


# ------------------------------------------------------------------------------------------- kl_cov
def test_kl_cov_by_hand():
    # lp = [-1, -2, -3, -4 | masked -50], A = [2, 1, 0, -3 | 100], x = lp - old = [0.1, 0, -0.2, -0.3 | 5]
    # cov over valid tokens = [3, 0.5, 0, 4.5]; kl_cov_ratio 0.5 -> k = 2: tokens 3 and 0
    lp = leaf([[-1.0, -2.0, -3.0, -4.0, -50.0]])
    x = torch.tensor([[0.1, 0.0, -0.2, -0.3, 5.0]])
    old = lp.detach() - x
    adv = torch.tensor([[2.0, 1.0, 0.0, -3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    cfg = actor_cfg(policy_loss=dict(kl_cov_ratio=0.5, ppo_kl_coef=0.1))
    loss, metrics = call("kl_cov", old, lp, adv, mask, "token-mean", cfg)
    e1, e3 = math.exp(0.1), math.exp(-0.3)
    # t0: -2 e^0.1 + 0.1*0.1; t1: -1; t2: 0; t3: 3 e^-0.3 + 0.1*0.3
    assert loss.item() == pytest.approx((-2 * e1 + 0.01 - 1 + 0 + 3 * e3 + 0.03) / 4, abs=1e-6)
    assert metrics[KL] == pytest.approx((0.1 + 0 + 0.2 + 0.3) / 4, abs=1e-6)
    expected = torch.tensor([[-2 * e1 + 0.1, -1.0, 0.0, 3 * e3 - 0.1, 0.0]]) / 4
    assert torch.allclose(grad_of(loss, lp), expected, atol=1e-6)


def test_kl_cov_default_ratio_picks_at_least_one_token():
    lp = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])
    x = torch.tensor([[0.1, 0.0, -0.2, -0.3]])
    adv = torch.tensor([[2.0, 1.0, 0.0, -3.0]])
    # int(4 * 2e-4) = 0 -> k = 1: only token 3 (cov 4.5)
    loss, _ = call("kl_cov", lp - x, lp, adv, torch.ones(1, 4), "token-mean", actor_cfg())
    e1, e3 = math.exp(0.1), math.exp(-0.3)
    assert loss.item() == pytest.approx((-2 * e1 - 1 + 3 * e3 + 0.03) / 4, abs=1e-6)


# ----------------------------------------------------------------------------------------- geo_mean
def test_geo_mean_by_hand():
    # range: log-ratio in [-0.2, 0.3]
    # row 0 (A = +1): x = [0.5, -0.1, 0.05] -> min(x, clip) = [0.3, -0.1, 0.05], mean 0.25/3; Abar 1
    # row 1 (A = [-1, -2 | masked 3]): x = [-0.5, 0.4 | 7] -> max(x, clip) = [-0.2, 0.4], mean 0.1; Abar -1.5
    # row 2 all masked; S = 2 -> loss = (-e^(0.25/3) + 1.5 e^0.1) / 2
    old = torch.full((3, 3), -1.0)
    x = torch.tensor([[0.5, -0.1, 0.05], [-0.5, 0.4, 7.0], [2.0, 2.0, 2.0]])
    lp = (old + x).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -2.0, 3.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.3)
    loss, metrics = call("geo_mean", old, lp, adv, mask, "token-mean", cfg)
    r0, r1 = math.exp(0.25 / 3), math.exp(0.1)
    assert loss.item() == pytest.approx((-r0 + 1.5 * r1) / 2, abs=1e-6)
    assert metrics[CLIPFRAC] == pytest.approx(1 / 5)  # row 0 token 0
    assert metrics[LOWER] == pytest.approx(2 / 5)  # row 1 tokens 0 and 1
    assert metrics[KL] == pytest.approx(-(0.5 - 0.1 + 0.05 - 0.5 + 0.4) / 5, abs=1e-6)
    # d/dlogp: -Abar_i * ratio_i / n_i / S on tokens whose own log-ratio is kept, 0 on clipped ones
    expected = torch.tensor([[0.0, -r0 / 3 / 2, -r0 / 3 / 2], [0.0, 1.5 * r1 / 2 / 2, 0.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(grad_of(loss, lp), expected, atol=1e-6)


# -------------------------------------------------------------------------------------- registry
def test_every_loss_is_registered_and_unknown_lists_them():
    for name in ALL_LOSSES:
        assert callable(get_policy_loss_fn(name))
    with pytest.raises(ValueError) as err:
        get_policy_loss_fn("nope")
    for name in ALL_LOSSES:
        assert name in str(err.value)


def test_register_policy_loss_decorator():
    @register_policy_loss("_golden_probe_loss")
    def probe(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **kwargs):
        return (-advantages * log_prob * response_mask).sum(), {}

    assert get_policy_loss_fn("_golden_probe_loss") is probe
