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


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim (a plain, differentiable reference implementation)."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


class _LogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)  # fp32 math for bf16 logits; fp64 stays fp64
        log_probs = torch.empty(rows, dtype=dtype, device=logits.device)
        entropy = torch.empty(rows, dtype=dtype, device=logits.device)
        shift = torch.empty(rows, dtype=dtype, device=logits.device)
        log_norm = torch.empty(rows, dtype=dtype, device=logits.device)  # logsumexp of the shifted logits
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            z = logits[start:end].to(dtype) / temperature
            top = z.max(-1, keepdim=True).values
            z = z - top  # max 0: the entropy's two terms stay small, no cancellation for large logits
            lse = torch.logsumexp(z, dim=-1)
            probs = torch.exp(z - lse.unsqueeze(-1))
            shift[start:end], log_norm[start:end] = top.squeeze(-1), lse
            entropy[start:end] = lse - (probs * z).sum(-1)
            log_probs[start:end] = z.gather(-1, tokens[start:end].unsqueeze(-1)).squeeze(-1) - lse
        ctx.save_for_backward(logits, tokens, shift, log_norm, entropy)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None, not zeros
        ctx.temperature = temperature
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        logits, tokens, shift, log_norm, entropy = ctx.saved_tensors
        rows, vocab = logits.shape
        grad_logits = torch.empty_like(logits)
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            z = logits[start:end].to(shift.dtype) / ctx.temperature - shift[start:end].unsqueeze(-1)
            lse = log_norm[start:end].unsqueeze(-1)
            probs = torch.exp(z - lse)
            grad = torch.zeros_like(z)
            if grad_log_probs is not None:
                g = grad_log_probs[start:end].unsqueeze(-1)
                grad -= probs * g
                grad.scatter_add_(-1, tokens[start:end].unsqueeze(-1), g)
            if grad_entropy is not None:
                mean_z = lse - entropy[start:end].unsqueeze(-1)  # E_p[z]
                grad -= probs * (z - mean_z) * grad_entropy[start:end].unsqueeze(-1)
            grad_logits[start:end] = (grad / ctx.temperature).to(logits.dtype)
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

    d KL / dz = p * (log p - log q - KL); the reference is a constant.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, ref_logits: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        dtype = torch.promote_types(logits.dtype, torch.float32)
        kl = torch.empty(rows, dtype=dtype, device=logits.device)
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            log_p = torch.log_softmax(logits[start:end].to(dtype) / temperature, -1)
            log_q = torch.log_softmax(ref_logits[start:end].to(dtype) / temperature, -1)
            kl[start:end] = (log_p.exp() * (log_p - log_q)).sum(-1)
        ctx.save_for_backward(logits, ref_logits, kl)
        ctx.temperature = temperature
        return kl

    @staticmethod
    def backward(ctx, grad_kl: torch.Tensor):
        logits, ref_logits, kl = ctx.saved_tensors
        rows, vocab = logits.shape
        grad_logits = torch.empty_like(logits)
        for start, end in _chunks(rows, vocab, logits.is_cuda):
            log_p = torch.log_softmax(logits[start:end].to(kl.dtype) / ctx.temperature, -1)
            log_q = torch.log_softmax(ref_logits[start:end].to(kl.dtype) / ctx.temperature, -1)
            grad = log_p.exp() * (log_p - log_q - kl[start:end].unsqueeze(-1)) * grad_kl[start:end].unsqueeze(-1)
            grad_logits[start:end] = (grad / ctx.temperature).to(logits.dtype)
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
