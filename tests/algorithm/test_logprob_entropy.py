"""log_probs_from_logits: values and gradients equal the plain torch computation (written here)."""

import numpy as np
import pytest
import torch

from reinforge.algorithm import log_probs_from_logits


def plain(logits, tokens, temperature=1.0):
    """The reference: log-softmax(logits / T) at the tokens, and the entropy of softmax(logits / T)."""
    logp_all = torch.log_softmax(logits / temperature, dim=-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def numpy_reference(logits, tokens, temperature):
    z = logits / temperature
    z = z - z.max(-1, keepdims=True)
    logp_all = z - np.log(np.exp(z).sum(-1, keepdims=True))
    logp = np.take_along_axis(logp_all, tokens[..., None], -1)[..., 0]
    return logp, -(np.exp(logp_all) * logp_all).sum(-1)


def inputs(b, t, v, seed=0, scale=2.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(b, t, v, generator=g) * scale).to(dtype)
    tokens = torch.randint(0, v, (b, t), generator=g)
    return logits, tokens


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.5])
def test_values_against_numpy(temperature):
    logits, tokens = inputs(2, 3, 5)
    exp_lp, exp_ent = numpy_reference(logits.double().numpy(), tokens.numpy(), temperature)
    lp, ent = log_probs_from_logits(logits, tokens, temperature=temperature, with_entropy=True)
    assert lp.shape == (2, 3) and ent.shape == (2, 3)
    np.testing.assert_allclose(lp.double().numpy(), exp_lp, atol=1e-5)
    np.testing.assert_allclose(ent.double().numpy(), exp_ent, atol=1e-5)


@pytest.mark.parametrize(("temperature", "w_lp", "w_ent"), [(1.0, 1.0, 0.0), (0.8, 0.0, 1.0), (0.8, 0.7, -0.3),
                                                             (1.3, -1.0, 2.0)])
def test_values_and_gradients_match_plain_torch_large_vocab(temperature, w_lp, w_ent):
    logits, tokens = inputs(4, 33, 1000, seed=1)
    weights = torch.randn(4, 33, generator=torch.Generator().manual_seed(2))

    ref_in = logits.clone().requires_grad_(True)
    ref_lp, ref_ent = plain(ref_in, tokens, temperature)
    ((w_lp * weights * ref_lp + w_ent * ref_ent).sum()).backward()

    got_in = logits.clone().requires_grad_(True)
    lp, ent = log_probs_from_logits(got_in, tokens, temperature=temperature, with_entropy=True)
    assert torch.allclose(lp, ref_lp, atol=1e-5)
    assert torch.allclose(ent, ref_ent, atol=1e-4)
    loss = 0.0
    if w_lp:
        loss = loss + (w_lp * weights * lp).sum()
    if w_ent:
        loss = loss + (w_ent * ent).sum()
    loss.backward()
    assert torch.allclose(got_in.grad, ref_in.grad, atol=1e-6, rtol=1e-4)


def test_without_entropy():
    logits, tokens = inputs(3, 4, 50, seed=3)
    ref_in = logits.clone().requires_grad_(True)
    ref_lp, _ = plain(ref_in, tokens, 0.9)
    ref_lp.sum().backward()
    got_in = logits.clone().requires_grad_(True)
    lp, ent = log_probs_from_logits(got_in, tokens, temperature=0.9, with_entropy=False)
    assert ent is None
    assert torch.allclose(lp, ref_lp, atol=1e-5)
    lp.sum().backward()
    assert torch.allclose(got_in.grad, ref_in.grad, atol=1e-6)


def test_non_contiguous_logits_slice():
    # the usual call: logits[:, :-1] of a longer forward pass
    full, _ = inputs(2, 6, 40, seed=4)
    tokens = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(5))
    ref_in = full.clone().requires_grad_(True)
    ref_lp, ref_ent = plain(ref_in[:, :-1], tokens, 1.0)
    (ref_lp.sum() + 0.5 * ref_ent.sum()).backward()
    got_in = full.clone().requires_grad_(True)
    lp, ent = log_probs_from_logits(got_in[:, :-1], tokens, temperature=1.0, with_entropy=True)
    (lp.sum() + 0.5 * ent.sum()).backward()
    assert torch.allclose(lp, ref_lp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    assert torch.allclose(got_in.grad, ref_in.grad, atol=1e-6)


def test_extreme_logits_stay_finite():
    logits = torch.tensor([[[1e4, 0.0, -1e4], [50.0, 50.0, 50.0]]], requires_grad=True)
    tokens = torch.tensor([[2, 1]])
    lp, ent = log_probs_from_logits(logits, tokens, temperature=1.0, with_entropy=True)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    assert lp[0, 1].item() == pytest.approx(-np.log(3), abs=1e-5)
    assert ent[0, 0].item() == pytest.approx(0.0, abs=1e-5)
    assert ent[0, 1].item() == pytest.approx(np.log(3), abs=1e-3)  # precision: see the shifted-logits test
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("shift", [30.0, 100.0])
def test_entropy_precision_with_shifted_logits(shift):
    # softmax is shift-invariant; LM logits commonly sit tens of units from 0. Plain torch in float32
    # stays within ~3e-6 (values) and ~2e-6 (gradients) of float64 here; the one-pass result should
    # be about as accurate.
    logits, tokens = inputs(4, 8, 1000, seed=7)
    exact_in = (logits.double() + shift).requires_grad_(True)
    exact_lp, exact_ent = plain(exact_in, tokens)
    (exact_lp.sum() + exact_ent.sum()).backward()

    ref_in = (logits + shift).requires_grad_(True)
    ref_lp, ref_ent = plain(ref_in, tokens)
    (ref_lp.sum() + ref_ent.sum()).backward()
    assert (ref_ent.double() - exact_ent).abs().max() < 2e-5  # the reference itself
    assert (ref_in.grad.double() - exact_in.grad).abs().max() < 1e-5

    got_in = (logits + shift).requires_grad_(True)
    lp, ent = log_probs_from_logits(got_in, tokens, temperature=1.0, with_entropy=True)
    (lp.sum() + ent.sum()).backward()
    lp_err = (lp.detach().double() - exact_lp.detach()).abs().max().item()
    ent_err = (ent.detach().double() - exact_ent.detach()).abs().max().item()
    grad_err = (got_in.grad.double() - exact_in.grad).abs().max().item()
    assert lp_err < 2e-5, f"log-prob error {lp_err:.2e}"
    assert ent_err < 2e-5, f"entropy error {ent_err:.2e}"
    assert grad_err < 1e-5, f"gradient error {grad_err:.2e}"


def test_gradcheck_float64():
    logits, tokens = inputs(1, 2, 5, seed=6, dtype=torch.float64)
    lp, _ = log_probs_from_logits(logits, tokens, temperature=1.3, with_entropy=True)
    if lp.dtype != torch.float64:
        pytest.skip("log_probs_from_logits does not compute in float64")
    logits.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: log_probs_from_logits(x, tokens, temperature=1.3, with_entropy=True),
                                    (logits,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_full_kl_from_logits_matches_the_plain_computation_and_its_gradient(temperature):
    from reinforge.algorithm import full_kl_from_logits

    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(3, 5, 300, generator=g, dtype=torch.float64) * 2 + 20).requires_grad_(True)
    ref_logits = torch.randn(3, 5, 300, generator=g, dtype=torch.float64) * 2
    weights = torch.randn(3, 5, generator=g, dtype=torch.float64)
    ours = full_kl_from_logits(logits, ref_logits, temperature)
    (ours * weights).sum().backward()
    grad_ours = logits.grad.clone()
    logits.grad = None
    log_p = torch.log_softmax(logits / temperature, -1)  # the plain definition: sum_v p (log p - log q)
    log_q = torch.log_softmax(ref_logits / temperature, -1)
    plain = (log_p.exp() * (log_p - log_q)).sum(-1)
    (plain * weights).sum().backward()
    assert torch.allclose(ours, plain, atol=1e-10) and (plain > 0).all()
    assert torch.allclose(grad_ours, logits.grad, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_full_kl_gradient_stays_precise_near_the_reference(dtype, temperature):
    """A policy near its reference (the usual case under a KL loss): the gradient p (log p - log q - KL) is a
    small difference. Taking log p - log q from two separately rounded log-softmaxes left a relative error of
    1.5e-4 (T=1) and 2.9e-4 (T=0.7) in fp32 here; from (logits - ref_logits) / T it is 2.6e-7 and 7.3e-7. The KL
    itself (about 5e-7 here) is limited by the two log-normalizers' rounding either way."""
    from reinforge.algorithm import full_kl_from_logits

    g = torch.Generator().manual_seed(11)
    ref_logits = (torch.randn(64, 32768, generator=g) * 3).to(dtype)
    change = 1e-3 if dtype == torch.float32 else 0.05  # bf16 cannot hold a 1e-3 change
    logits = (ref_logits.float() + torch.randn(64, 32768, generator=g) * change).to(dtype)
    weights = torch.randn(64, generator=g, dtype=torch.float64)
    ours_in = logits.clone().requires_grad_(True)
    ours = full_kl_from_logits(ours_in, ref_logits, temperature)
    (ours.double() * weights).sum().backward()
    exact_in = logits.double().requires_grad_(True)
    log_p = torch.log_softmax(exact_in / temperature, -1)
    log_q = torch.log_softmax(ref_logits.double() / temperature, -1)
    exact = (log_p.exp() * (log_p - log_q)).sum(-1)
    (exact * weights).sum().backward()
    assert ours.dtype == torch.float32 and (exact > 0).all()
    kl_err = ((ours.double() - exact).abs().max() / exact.abs().max()).item()
    grad_err = ((ours_in.grad.double() - exact_in.grad).abs().max() / exact_in.grad.abs().max()).item()
    assert kl_err < (0.5 if dtype == torch.float32 else 1e-3), f"KL error {kl_err:.2e}"  # fp32 KL ~ 5e-7 here: lse-limited
    assert grad_err < (2e-6 if dtype == torch.float32 else 4e-3), f"gradient error {grad_err:.2e}"  # bf16: rounding the gradient
