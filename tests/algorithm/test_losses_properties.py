"""Every policy loss on random batches: against numpy loops of the formulas, with all-masked rows,
and split into micro-batches with the mini-batch's totals (the gradient must not change)."""

import math

import pytest
import torch
from loss_reference import ALL_LOSSES, MODES, actor_cfg, call, grad_of, np_loss, random_batch

# ------------------------------------------------------------------------- random vs numpy loops
RANDOM_LOSSES = ["vanilla", "gspo", "sapo", "gpg", "cispo", "geo_mean", "kl_cov", "up", "dppo_tv", "dppo_kl", "dro", "topr",
                 "cppo"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", RANDOM_LOSSES)
def test_random_batch_against_numpy(name, mode):
    old, lp, a, m = random_batch(3)
    low, high = 0.15, 0.25
    cfg = actor_cfg(clip_ratio=0.2, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=2.0, tau_pos=1.3, tau_neg=0.9,
                    policy_loss=dict(kl_cov_ratio=0.3, ppo_kl_coef=0.2, dro_beta=0.7, topr_negative_ratio_lower=0.1,
                                     topr_negative_ratio_upper=0.9))
    cfg.policy_loss.cppo.cppo_w_min, cfg.policy_loss.cppo.cppo_delta_b = 0.5, 0.01
    exp_loss, exp_metrics = np_loss(name, old, lp, a, m, mode, low=low, high=high, c=2.0, tau_pos=1.3, tau_neg=0.9,
                                    kl_ratio=0.3, kl_coef=0.2, dro_beta=0.7, delta=0.2, topr=(0.1, 0.9),
                                    cppo=(0.5, 0.01, 0.9, 1.0))
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    loss, metrics = call(name, t(old), t(lp), t(a), t(m), mode, cfg)
    assert loss.item() == pytest.approx(float(exp_loss), rel=1e-7, abs=1e-7)
    for key, value in exp_metrics.items():
        assert float(metrics[key]) == pytest.approx(value, rel=1e-7, abs=1e-7), key


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_metrics_are_floats(name):
    old, lp, a, m = random_batch(4, dtype=torch.float32)
    t = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    cfg = actor_cfg(policy_loss=dict(clip_cov_lb=100.0, clip_cov_ub=200.0, dro_beta=0.5))
    _, metrics = call(name, t(old), t(lp), t(a), t(m), "token-mean", cfg)
    assert isinstance(metrics, dict)
    for key, value in metrics.items():
        assert isinstance(value, float), (key, type(value))
        assert math.isfinite(value)


# ----------------------------------------------------------------------------- all-masked rows
# clip_cov made deterministic: bounds nothing reaches, or bounds everything reaches with ratio 1
SPLIT_CONFIGS = {
    "vanilla": dict(clip_ratio_low=0.15, clip_ratio_high=0.25, clip_ratio_c=2.0),
    "gspo": dict(clip_ratio_low=0.05, clip_ratio_high=0.08),
    "sapo": dict(tau_pos=1.3, tau_neg=0.9),
    "gpg": {},
    "cispo": dict(clip_ratio_low=0.15, clip_ratio_high=0.25),
    "up": dict(clip_ratio_low=0.15, clip_ratio_high=0.25, clip_ratio_c=2.0),
    "dppo_tv": dict(clip_ratio_low=0.1, clip_ratio_high=0.15, clip_ratio_c=1.2),
    "dppo_kl": dict(clip_ratio_low=0.02, clip_ratio_high=0.03, clip_ratio_c=1.2),
    "geo_mean": dict(clip_ratio_low=0.2, clip_ratio_high=0.3),
    "dro": dict(policy_loss=dict(dro_beta=0.4)),
    "topr": dict(policy_loss=dict(topr_negative_ratio_lower=0.1, topr_negative_ratio_upper=0.9)),
    "cppo": dict(clip_ratio=0.1, clip_ratio_c=1.2),
    "clip_cov/none": dict(clip_ratio_low=0.15, clip_ratio_high=0.25,
                          policy_loss=dict(clip_cov_ratio=0.5, clip_cov_lb=1e8, clip_cov_ub=2e8)),
    "clip_cov/all": dict(clip_ratio_low=0.15, clip_ratio_high=0.25,
                         policy_loss=dict(clip_cov_ratio=1.0, clip_cov_lb=-1e8, clip_cov_ub=1e8)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key", [*SPLIT_CONFIGS, "kl_cov"])
def test_all_masked_row_does_not_change_the_loss(key, mode):
    name = key.split("/")[0]
    fields = dict(SPLIT_CONFIGS.get(key, dict(policy_loss=dict(kl_cov_ratio=0.3))))
    cfg = actor_cfg(**fields)
    old, lp, a, m = random_batch(5, all_masked_row=False)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    base, _ = call(name, t(old[:4]), t(lp[:4]), t(a[:4]), t(m[:4]), mode, cfg)
    # a fifth, fully masked row of garbage: log-ratio 3, advantage 7
    old5, lp5, a5, m5 = old.copy(), lp.copy(), a.copy(), m.copy()
    lp5[4], old5[4], a5[4], m5[4] = -1.0, -4.0, 7.0, 0.0
    lp_leaf = t(lp5).requires_grad_(True)
    loss, metrics = call(name, t(old5), lp_leaf, t(a5), t(m5), mode, cfg)
    assert loss.item() == pytest.approx(base.item(), abs=1e-9)
    g = grad_of(loss, lp_leaf)
    assert torch.all(g[4] == 0)
    for value in metrics.values():
        assert math.isfinite(float(value))


# --------------------------------------------------------------------------------- micro-batches
# kl_cov is left out: its top-k by covariance is taken over the tokens of each call, so a micro-batch
# penalises a different set of tokens than the whole batch does (by design, as in verl).
# The second split puts the all-masked row alone in a micro-batch, which must contribute exactly 0.
@pytest.mark.parametrize("splits", [((0, 2), (2, 3), (3, 5)), ((0, 4), (4, 5))], ids=["3-micro", "masked-micro"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key", list(SPLIT_CONFIGS))
def test_micro_batches_with_global_batch_info_reproduce_the_full_batch(key, mode, splits):
    name = key.split("/")[0]
    fields = SPLIT_CONFIGS[key]
    old, lp, a, m = random_batch(6)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    old_t, a_t, m_t = t(old), t(a), t(m)

    lp_full = t(lp).requires_grad_(True)
    full, _ = call(name, old_t, lp_full, a_t, m_t, mode, actor_cfg(**fields))
    g_full = grad_of(full, lp_full)

    cfg = actor_cfg(**fields)
    cfg.global_batch_info = dict(dp_size=1, batch_num_tokens=float(m.sum()), global_batch_size=int((m.sum(-1) > 0).sum()),
                                 loss_scale_factor=m.shape[-1])
    lp_micro = t(lp).requires_grad_(True)
    total = 0.0
    for start, stop in splits:
        rows = slice(start, stop)
        part, _ = call(name, old_t[rows], lp_micro[rows], a_t[rows], m_t[rows], mode, cfg)
        assert torch.isfinite(part)
        if m[rows].sum() == 0:
            assert part.item() == 0.0
        total = total + part
    g_micro = grad_of(total, lp_micro)
    assert total.item() == pytest.approx(full.item(), abs=1e-6)
    assert torch.allclose(g_micro, g_full, atol=1e-6)
