"""Log-probs of sampled tokens and the entropy of the policy, from logits, without extra vocabulary copies.

The plain way (`log_softmax`, then `softmax * logits` for the entropy) keeps two or three
tensors the size of the logits alive for the backward pass. `log_probs_from_logits` computes
both quantities in row chunks and keeps only the logits themselves (which the model produced
anyway) plus two numbers per token; its backward recomputes the softmax chunk by chunk:

    d log p(y) / dz = onehot(y) - p          d H / dz = -p * (z - E_p[z]),   E_p[z] = logsumexp(z) - H

with z = logits / temperature, shifted by its row maximum so that large logits lose no precision.
"""

from __future__ import annotations

import torch


def _chunks(rows: int, vocab: int, on_gpu: bool):
    """Row ranges holding about 4M logits (CPU) or 32M (GPU, where fewer, larger kernels pay) each."""
    size = max(1, (1 << 25 if on_gpu else 1 << 22) // max(vocab, 1))
    for start in range(0, rows, size):
        yield start, min(start + size, rows)


def _shifted(logits: torch.Tensor, dtype: torch.dtype, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """z = logits / T minus its row maximum, in one pass (z <= 0, so exp(z) <= 1 and sums of z exp(z) have
    no cancellation for large logits), and that maximum per row."""
    chunk = logits.to(dtype)
    top = chunk.amax(-1, keepdim=True) * scale  # T > 0
    return torch.add(-top, chunk, alpha=scale), top.squeeze(-1)


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim (a plain, differentiable reference implementation)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


class _LogProbEntropy(torch.autograd.Function):
    """A pass over a chunk of the logits costs about as much as the next, so each chunk takes few: forward the
    maximum, the shifted z, its exp, their sum and one dot product; backward log p, its exp, and for the
    entropy two in-place passes, then one product written into the gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)  # fp32 math for bf16 logits; fp64 stays fp64
        scale = 1.0 / temperature
        log_probs = torch.empty(rows, dtype=dtype, device=logits.device)
        entropy = torch.empty(rows, dtype=dtype, device=logits.device)
        shift = torch.empty(rows, dtype=dtype, device=logits.device)
        log_norm = torch.empty(rows, dtype=dtype, device=logits.device)  # logsumexp of the shifted logits
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            z, shift[start:end] = _shifted(logits[start:end], dtype, scale)
            weights = z.exp()
            total = weights.sum(-1)
            lse = total.log()
            log_norm[start:end] = lse
            entropy[start:end] = lse - torch.linalg.vecdot(weights, z) / total  # H = lse - E_p[z]
            log_probs[start:end] = z.gather(-1, tokens[start:end].unsqueeze(-1)).squeeze(-1) - lse
        ctx.save_for_backward(logits, tokens, shift, log_norm, entropy)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None, not zeros
        ctx.temperature = temperature
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        if grad_log_probs is None and grad_entropy is None:
            return None, None, None
        logits, tokens, shift, log_norm, entropy = ctx.saved_tensors
        rows, vocab = logits.shape
        scale = 1.0 / ctx.temperature
        offset = shift + log_norm  # log p = logits / T - offset
        grad_logits = torch.empty_like(logits)
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            log_p = torch.add(-offset[start:end].unsqueeze(-1), logits[start:end].to(offset.dtype), alpha=scale)
            probs = log_p.exp()
            g = None if grad_log_probs is None else grad_log_probs[start:end].unsqueeze(-1)
            # dz = (onehot(y) - p) g - p (z - E_p[z]) g_H, with z - E_p[z] = log p + H; all / T for the logits
            if grad_entropy is None:
                weight = g * -scale
            else:
                g_h = grad_entropy[start:end].unsqueeze(-1)
                bias = g_h * entropy[start:end].unsqueeze(-1) + (0.0 if g is None else g)
                weight = log_p.mul_(g_h * -scale).add_(bias * -scale)
            out = grad_logits[start:end] if grad_logits.dtype == probs.dtype else log_p
            torch.mul(probs, weight, out=out)
            if g is not None:
                out.scatter_add_(-1, tokens[start:end].unsqueeze(-1), g * scale)
            if out is log_p:  # bf16 logits: the gradient in fp32, then rounded once
                grad_logits[start:end] = out.to(logits.dtype)
        return grad_logits, None, None


def log_probs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                          with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / temperature) at `tokens`, and the entropy of that distribution.

    `logits` is (..., vocab) and `tokens` (...); both outputs have the shape of `tokens`, in fp32
    (fp64 for fp64 logits).
    Differentiable in `logits`; the entropy is None when `with_entropy` is false.
    """
    shape = tokens.shape
    flat_logits = logits.reshape(-1, logits.shape[-1])
    log_probs, entropy = _LogProbEntropy.apply(flat_logits, tokens.reshape(-1), float(temperature))
    return log_probs.view(shape), entropy.view(shape) if with_entropy else None


class _FullKL(torch.autograd.Function):
    """Exact KL(softmax(z) || softmax(z_ref)) per row, z = logits / T, with the same chunked recompute.

    d KL / dz = p * (log p - log q - KL); the reference is a constant. log p - log q is taken as
    (logits - ref_logits) / T less a row constant, so a policy near its reference keeps the difference's
    precision. Each chunk takes few passes, as in `_LogProbEntropy`: forward each side's maximum, shifted z,
    exp and sum, the difference and one dot product; backward log p, its exp, the difference, one pass to
    scale it and one product written into the gradient.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ref_logits: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)
        scale = 1.0 / temperature
        kl = torch.empty(rows, dtype=dtype, device=logits.device)
        offset = torch.empty(rows, dtype=dtype, device=logits.device)  # log p = logits / T - offset
        gap = torch.empty(rows, dtype=dtype, device=logits.device)  # log p - log q = (logits - ref_logits) / T - gap
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            z, top = _shifted(logits[start:end], dtype, scale)
            z_ref, top_ref = _shifted(ref_logits[start:end], dtype, scale)
            weights = z.exp()
            total = weights.sum(-1)
            lse, lse_ref = total.log(), z_ref.exp_().sum(-1).log()
            # the row constants' difference in fp64: no cancellation when the policy is near its reference
            gap[start:end] = ((top.double() - top_ref.double()) + (lse.double() - lse_ref.double())).to(dtype)
            offset[start:end] = top + lse
            diff = torch.sub(logits[start:end].to(dtype), ref_logits[start:end].to(dtype), out=z)
            kl[start:end] = torch.linalg.vecdot(weights, diff) * (scale / total) - gap[start:end]  # E_p[log p - log q]
        ctx.save_for_backward(logits, ref_logits, offset, gap, kl)
        ctx.temperature = temperature
        return kl

    @staticmethod
    def backward(ctx, grad_kl: torch.Tensor):
        logits, ref_logits, offset, gap, kl = ctx.saved_tensors
        rows, vocab = logits.shape
        scale = 1.0 / ctx.temperature
        grad_logits = torch.empty_like(logits)
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            chunk = logits[start:end].to(kl.dtype)
            probs = torch.add(-offset[start:end].unsqueeze(-1), chunk, alpha=scale).exp_()
            g = (grad_kl[start:end] * scale).unsqueeze(-1)  # the incoming gradient, / T for the logits
            # (log p - log q - KL) * g = (logits - ref_logits) * (g / T) - (gap + KL) * g
            diff = torch.sub(chunk, ref_logits[start:end].to(kl.dtype))
            torch.addcmul(-(gap[start:end] + kl[start:end]).unsqueeze(-1) * g, diff, g * scale, out=diff)
            out = grad_logits[start:end] if grad_logits.dtype == probs.dtype else diff
            torch.mul(probs, diff, out=out)
            if out is diff:  # bf16 logits: the gradient in fp32, then rounded once
                grad_logits[start:end] = out.to(logits.dtype)
        return grad_logits, None, None


def full_kl_from_logits(logits: torch.Tensor, ref_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Exact per-token KL(policy || reference) over the vocabulary from both models' logits (..., vocab).

    Differentiable in `logits` (the reference is a constant); like `log_probs_from_logits` it keeps
    only the two logits tensors for the backward pass.
    """
    shape = logits.shape[:-1]
    vocab = logits.shape[-1]
    kl = _FullKL.apply(logits.reshape(-1, vocab), ref_logits.detach().reshape(-1, vocab), float(temperature))
    return kl.view(shape)


@torch.no_grad()
def sum_pi_squared_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Σ_v p(v)² per position of p = softmax(logits / temperature), (..., vocab) -> (...), in fp32 (fp64 for fp64).

    The optimal token baseline's weights need it (verl's `actor.calculate_sum_pi_squared`). Computed in row chunks
    as exp(logsumexp(2z) - 2 logsumexp(z)) on z shifted by its maximum, with no probability tensor kept."""
    shape, vocab = logits.shape[:-1], logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    dtype = torch.promote_types(logits.dtype, torch.float32)
    out = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
    for start, end in _chunks(flat.shape[0], vocab, logits.is_cuda):
        z, _ = _shifted(flat[start:end], dtype, 1.0 / temperature)
        out[start:end] = (torch.logsumexp(z * 2, -1) - 2 * torch.logsumexp(z, -1)).exp()
    return out.view(shape)
