"""Log-probs of sampled tokens and the entropy of the policy, from logits, without extra vocabulary copies.

The plain way (`log_softmax`, then `softmax * logits` for the entropy) keeps two or three
tensors the size of the logits alive for the backward pass. `log_probs_from_logits` computes
both quantities in row chunks and keeps only the logits themselves (which the model produced
anyway) plus two numbers per token; its backward recomputes the softmax chunk by chunk:

    d log p(y) / dz = onehot(y) - p          d H / dz = -p * (z - E_p[z]),   E_p[z] = logsumexp(z) - H

with z = logits / temperature.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 22  # logits entries processed at once (16 MiB in fp32)


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim (a plain, differentiable reference implementation)."""
    log_norm = torch.logsumexp(logits, dim=-1)
    return log_norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def _chunks(rows: int, vocab: int):
    size = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    for start in range(0, rows, size):
        yield start, min(start + size, rows)


class _LogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, temperature: float):
        rows, vocab = logits.shape
        log_probs = torch.empty(rows, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(rows, dtype=torch.float32, device=logits.device)
        log_norm = torch.empty(rows, dtype=torch.float32, device=logits.device)
        for start, end in _chunks(rows, vocab):
            z = logits[start:end].float() / temperature
            lse = torch.logsumexp(z, dim=-1)
            probs = torch.exp(z - lse.unsqueeze(-1))
            log_norm[start:end] = lse
            entropy[start:end] = lse - (probs * z).sum(-1)
            log_probs[start:end] = z.gather(-1, tokens[start:end].unsqueeze(-1)).squeeze(-1) - lse
        ctx.save_for_backward(logits, tokens, log_norm, entropy)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None, not zeros
        ctx.temperature = temperature
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        logits, tokens, log_norm, entropy = ctx.saved_tensors
        rows, vocab = logits.shape
        grad_logits = torch.empty_like(logits)
        for start, end in _chunks(rows, vocab):
            z = logits[start:end].float() / ctx.temperature
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

    `logits` is (..., vocab) and `tokens` (...); both outputs have the shape of `tokens`, in fp32.
    Differentiable in `logits`; the entropy is None when `with_entropy` is false.
    """
    shape = tokens.shape
    flat_logits = logits.reshape(-1, logits.shape[-1])
    log_probs, entropy = _LogProbEntropy.apply(flat_logits, tokens.reshape(-1), float(temperature))
    return log_probs.view(shape), entropy.view(shape) if with_entropy else None
