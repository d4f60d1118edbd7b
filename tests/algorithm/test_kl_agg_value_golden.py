"""Golden numbers for loss aggregation, the KL estimators and controllers, entropy and the value loss.

Expected values are worked out by hand (arithmetic in the comments) or with numpy from the
formulas in docs/algorithms.md; never from the functions under test.
"""

import math

import numpy as np
import pytest
import torch

from reinforge.algorithm import AdaptiveKLController, FixedKLController, agg_loss, compute_entropy, kl_penalty

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"]


# ----------------------------------------------------------------------------------------- agg_loss
def agg_example():
    # third row all masked, with garbage values that must not count
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    return loss, mask


# T = 4 tokens, S = 2 sequences, H = 3 (width); row sums 6 and 4, row means 2 and 4
DEFAULTS = {
    "token-mean": (10 / 4, [[1 / 4] * 3, [1 / 4, 0, 0]]),
    "seq-mean-token-sum": (10 / 2, [[1 / 2] * 3, [1 / 2, 0, 0]]),
    "seq-mean-token-mean": ((2 + 4) / 2, [[1 / 6] * 3, [1 / 2, 0, 0]]),
    "seq-mean-token-sum-norm": (10 / 2 / 3, [[1 / 6] * 3, [1 / 6, 0, 0]]),
    "token-sum": (10.0, [[1.0] * 3, [1.0, 0, 0]]),
}


@pytest.mark.parametrize("mode", MODES)
def test_agg_loss_defaults_by_hand(mode):
    loss, mask = agg_example()
    out = agg_loss(loss, mask, mode)
    value, grad_rows = DEFAULTS[mode]
    assert out.item() == pytest.approx(value, abs=1e-6)
    (g,) = torch.autograd.grad(out, loss)
    assert torch.isfinite(g).all()
    assert torch.allclose(g, torch.tensor([*grad_rows, [0.0, 0.0, 0.0]]), atol=1e-6)


# dp_size 2, batch_num_tokens 8, global_batch_size 5, loss_scale_factor 4:
GLOBAL = {
    "token-mean": 10 / 8 * 2,
    "seq-mean-token-sum": 10 / 5 * 2,
    "seq-mean-token-mean": (2 + 4) / 5 * 2,
    "seq-mean-token-sum-norm": 10 / 5 / 4 * 2,
    "token-sum": 10 * 2,
}


@pytest.mark.parametrize("mode", MODES)
def test_agg_loss_global_batch_info_by_hand(mode):
    loss, mask = agg_example()
    out = agg_loss(loss, mask, mode, dp_size=2, batch_num_tokens=8, global_batch_size=5, loss_scale_factor=4)
    assert out.item() == pytest.approx(GLOBAL[mode], abs=1e-6)


def test_agg_loss_unknown_mode():
    loss, mask = agg_example()
    with pytest.raises(ValueError):
        agg_loss(loss, mask, "nope")


# --------------------------------------------------------------------------------------------- KL
LP = [-1.0, -2.0, -0.5, -1.2]
REF = [-1.5, -1.0, -0.8, -1.2]
X = [a - b for a, b in zip(LP, REF, strict=True)]  # [0.5, -1.0, 0.3, 0.0]


def k3(x):
    # exp(-x) + x - 1 with -x clamped to [-20, 20] and the result to [-10, 10]
    kl = min(max(-x, -20.0), 20.0)
    return min(max(math.exp(kl) - kl - 1, -10.0), 10.0)


VALUES = {
    "kl": X,
    "k1": X,
    "abs": [abs(x) for x in X],
    "mse": [x * x / 2 for x in X],  # [0.125, 0.5, 0.045, 0]
    "k2": [x * x / 2 for x in X],
    "low_var_kl": [k3(x) for x in X],  # [e^-0.5 - 0.5, e - 2, e^-0.3 - 0.7, 0]
    "k3": [k3(x) for x in X],
}


@pytest.mark.parametrize("name", list(VALUES))
def test_kl_estimator_values(name):
    lp = torch.tensor([LP, LP])
    ref = torch.tensor([REF, REF])
    out = kl_penalty(lp, ref, name)
    assert out.shape == (2, 4)
    assert torch.allclose(out, torch.tensor([VALUES[name]] * 2), atol=1e-6)


def test_k3_by_hand_and_its_clamps():
    assert k3(0.5) == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    lp = torch.tensor([2.0, -3.0, 30.0, -30.0])
    out = kl_penalty(lp, torch.zeros(4), "k3")
    # x = 2: e^-2 + 2 - 1 = 1.135335; x = -3: e^3 - 4 = 16.09 -> 10;
    # x = 30: -x clamped to -20: e^-20 + 19 -> 10; x = -30: e^20 - 21 -> 10
    assert torch.allclose(out, torch.tensor([math.exp(-2) + 1, 10.0, 10.0, 10.0]), atol=1e-5)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(("name", "grad"), [
    ("kl", [1.0, 1.0, 1.0]),
    ("abs", [1.0, -1.0, 1.0]),
    ("mse", [0.5, -1.0, 0.3]),
    ("low_var_kl", [1 - math.exp(-0.5), 1 - math.exp(1.0), 1 - math.exp(-0.3)]),
])
def test_kl_estimator_gradients(name, grad):
    # d/dlp of x = 1; |x|: sign x; x^2/2: x; exp(-x) + x - 1: 1 - exp(-x)
    lp = torch.tensor(LP[:3], requires_grad=True)
    (g,) = torch.autograd.grad(kl_penalty(lp, torch.tensor(REF[:3]), name).sum(), lp)
    assert torch.allclose(g, torch.tensor(grad), atol=1e-6)


@pytest.mark.parametrize(("name", "base"), [("k1+", "kl"), ("kl+", "kl"), ("abs+", "abs"), ("k3+", "k3"),
                                            ("low_var_kl+", "k3"), ("k2+", "mse"), ("mse+", "mse")])
def test_straight_through_kl_value_and_k2_gradient(name, base):
    lp = torch.tensor([LP], requires_grad=True)
    out = kl_penalty(lp, torch.tensor([REF]), name)
    assert torch.allclose(out.detach(), torch.tensor([VALUES[base]]), atol=1e-6)
    (g,) = torch.autograd.grad(out.sum(), lp)
    assert torch.allclose(g, torch.tensor([X]), atol=1e-6)  # gradient of x^2/2 is x


def test_full_kl_over_the_vocabulary_by_hand():
    # position 0: p = [0.5, 0.25, 0.25], q = [0.25, 0.25, 0.5]: 0.5 ln 2 + 0 + 0.25 ln 0.5 = 0.25 ln 2
    # position 1: p = q -> 0
    p = torch.tensor([[[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]]])
    q = torch.tensor([[[0.25, 0.25, 0.5], [0.2, 0.3, 0.5]]])
    out = kl_penalty(p.log(), q.log(), "full")
    assert out.shape == (1, 2)
    assert torch.allclose(out, torch.tensor([[0.25 * math.log(2), 0.0]]), atol=1e-6)


def test_full_kl_random_against_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 7)), rng.normal(size=(2, 3, 7))
    lp = a - np.log(np.exp(a).sum(-1, keepdims=True))
    lq = b - np.log(np.exp(b).sum(-1, keepdims=True))
    expected = (np.exp(lp) * (lp - lq)).sum(-1)
    out = kl_penalty(torch.tensor(lp), torch.tensor(lq), "full")
    np.testing.assert_allclose(out.double().numpy(), expected, atol=1e-6)


def test_unknown_kl_name():
    with pytest.raises(ValueError):
        kl_penalty(torch.zeros(2), torch.zeros(2), "nope")


# ---------------------------------------------------------------------------------- KL controllers
def test_adaptive_kl_controller_by_hand():
    ctrl = AdaptiveKLController(init_kl_coef=0.2, target_kl=0.1, horizon=100)
    assert ctrl.value == pytest.approx(0.2)
    ctrl.update(current_kl=0.11, n_steps=10)  # error 0.1 -> 0.2 * (1 + 0.1 * 10/100) = 0.202
    assert ctrl.value == pytest.approx(0.202)
    ctrl.update(current_kl=0.0, n_steps=50)  # error -1 clipped to -0.2 -> 0.202 * (1 - 0.2 * 50/100) = 0.1818
    assert ctrl.value == pytest.approx(0.1818)
    ctrl.update(current_kl=1.0, n_steps=100)  # error 9 clipped to 0.2 -> 0.1818 * 1.2 = 0.21816
    assert ctrl.value == pytest.approx(0.21816)

    restored = AdaptiveKLController(init_kl_coef=0.5, target_kl=0.1, horizon=100)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == pytest.approx(0.21816)
    restored.update(current_kl=0.12, n_steps=10)  # error 0.2 -> 0.21816 * 1.02
    assert restored.value == pytest.approx(0.21816 * 1.02)


def test_fixed_kl_controller():
    ctrl = FixedKLController(0.3)
    ctrl.update(current_kl=5.0, n_steps=100)
    assert ctrl.value == pytest.approx(0.3)
    other = FixedKLController(0.7)
    other.load_state_dict(ctrl.state_dict())
    assert other.value == pytest.approx(0.3)


# ---------------------------------------------------------------------------------------- entropy
def test_compute_entropy_against_numpy():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3.0, size=(2, 3, 11))
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    expected = -(np.exp(logp) * logp).sum(-1)
    out = compute_entropy(torch.tensor(logits))
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out.double().numpy(), expected, atol=1e-6)
    # uniform over 4 -> ln 4; a huge logit -> ~0, finite
    assert compute_entropy(torch.zeros(4)).item() == pytest.approx(math.log(4), abs=1e-6)
    peaked = compute_entropy(torch.tensor([[1000.0, 0.0, -1000.0]]))
    assert torch.isfinite(peaked).all() and peaked.item() == pytest.approx(0.0, abs=1e-6)


# ------------------------------------------------------------------------------------ value loss
def value_example():
    # c = 0.5; (vpred, return, old value):
    # (1.0, 2.0, 0.2): clip to 0.7 -> l1 = 1, l2 = 1.69 -> 1.69 (clipped)
    # (0.5, 0.0, 0.4): in [-0.1, 0.9] -> 0.25, 0.25 -> 0.25
    # (-1.0, 0.0, 0.0): clip to -0.5 -> l1 = 1, l2 = 0.25 -> 1
    # (3.0, 3.2, 1.0): clip to 1.5 -> l1 = 0.04, l2 = 2.89 -> 2.89 (clipped); then two masked tokens
    vpreds = torch.tensor([[1.0, 0.5, -1.0], [3.0, 100.0, 7.0]], requires_grad=True)
    returns = torch.tensor([[2.0, 0.0, 0.0], [3.2, -100.0, 0.0]])
    values = torch.tensor([[0.2, 0.4, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    return vpreds, returns, values, mask


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", 0.5 * (1.69 + 0.25 + 1 + 2.89) / 4),  # 0.72875
    ("seq-mean-token-mean", 0.5 * ((1.69 + 0.25 + 1) / 3 + 2.89) / 2),  # 0.9675
    ("seq-mean-token-sum", 0.5 * ((1.69 + 0.25 + 1) + 2.89) / 2),
])
def test_value_loss_by_hand(mode, expected):
    from reinforge.algorithm import compute_value_loss

    vpreds, returns, values, mask = value_example()
    vf_loss, vf_clipfrac = compute_value_loss(vpreds=vpreds, returns=returns, values=values, response_mask=mask,
                                              cliprange_value=0.5, loss_agg_mode=mode)
    assert vf_loss.item() == pytest.approx(expected, abs=1e-6)
    assert float(vf_clipfrac) == pytest.approx(0.5)
    if mode == "token-mean":
        (g,) = torch.autograd.grad(vf_loss, vpreds)
        # clipped tokens: 0; unclipped: 0.5 * 2 (v - G) / 4
        assert torch.allclose(g, torch.tensor([[0.0, 0.125, -0.25], [0.0, 0.0, 0.0]]), atol=1e-6)


def test_value_loss_default_mode_is_token_mean():
    from reinforge.algorithm import compute_value_loss

    vpreds, returns, values, mask = value_example()
    vf_loss, _ = compute_value_loss(vpreds, returns, values, mask, 0.5)
    assert vf_loss.item() == pytest.approx(0.72875, abs=1e-6)


def test_every_straight_through_name_is_accepted_as_verl_accepts_it():
    from reinforge.config import load_config

    for name in ("k2+", "mse+"):
        config, _ = load_config(["actor_rollout_ref.actor.use_kl_loss=true", f"actor_rollout_ref.actor.kl_loss_type={name}",
                                 "algorithm.use_kl_in_reward=true", f"algorithm.kl_penalty={name}"])
        assert config.actor_rollout_ref.actor.kl_loss_type == config.algorithm.kl_penalty == name


def test_values_under_the_mask_do_not_reach_the_loss():
    """A NaN or inf at a masked position counts as 0 (verl's masked sums use torch.where), in every aggregation mode."""
    from reinforge.algorithm.core import LOSS_AGG_MODES, agg_loss

    losses = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    clean = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]], requires_grad=True)
    for mode in LOSS_AGG_MODES:
        got, expected = agg_loss(losses, mask, mode), agg_loss(clean, mask, mode)
        assert torch.isfinite(got) and got.item() == pytest.approx(expected.item()), mode
        (grad,) = torch.autograd.grad(got, losses)
        assert torch.equal(grad, torch.autograd.grad(expected, clean)[0]), mode
