"""Masked reductions and loss aggregation shared by every estimator and loss.

`agg_loss` turns a (batch, response_len) matrix of per-token losses into one number, in one of
verl's four modes. When a mini-batch is split into micro-batches, the actor rescales each
micro-batch's value by `agg_scale` so that the accumulated gradient equals the full mini-batch's.
"""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return (values * mask).sum() if dim is None else (values * mask).sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is 1 (0 when the mask is empty)."""
    return masked_sum(values, mask, dim) / mask.sum(dim).clamp(min=1)


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    """Aggregate per-token losses (batch, response_len) into a scalar.

    - token-mean: mean over every unmasked token of the batch.
    - seq-mean-token-sum: sum over each sequence's tokens, mean over sequences.
    - seq-mean-token-mean: mean over each sequence's tokens, mean over sequences.
    - seq-mean-token-sum-norm: sum over all tokens divided by the response width (Dr. GRPO's
      constant normaliser, arXiv:2503.20783).
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode == "seq-mean-token-sum":
        return masked_sum(loss_mat, loss_mask, -1).mean()
    if loss_agg_mode == "seq-mean-token-mean":
        return masked_mean(loss_mat, loss_mask, -1).mean()
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return masked_sum(loss_mat, loss_mask) / loss_mask.shape[-1]
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}")


def agg_scale(loss_mask: torch.Tensor, loss_agg_mode: str, global_tokens: int, global_seqs: int) -> float:
    """Factor that turns a micro-batch's `agg_loss` into its share of the mini-batch's.

    token-mean normalises by tokens, the seq-mean modes by sequences; seq-mean-token-sum-norm is
    already a plain sum over a fixed width and needs no factor.
    """
    if loss_agg_mode == "token-mean":
        return float(loss_mask.sum()) / max(global_tokens, 1)
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        return loss_mask.shape[0] / max(global_seqs, 1)
    return 1.0


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last dim: logsumexp(z) - sum(softmax(z) * z)."""
    log_norm = torch.logsumexp(logits, dim=-1)
    return log_norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """verl's name for `entropy_from_logits`."""
    return entropy_from_logits(logits)
