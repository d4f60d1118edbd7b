"""Masked reductions, whitening, loss aggregation and the value loss shared by every algorithm.

`agg_loss` turns a (batch, response_len) matrix of per-token losses into one number, in one of
verl's modes. It normalises by the totals of the whole mini-batch when they are given
(`batch_num_tokens`, `global_batch_size`: the actor passes them as `config.global_batch_info`),
so each micro-batch returns exactly its share of the mini-batch loss and the accumulated
gradient does not depend on how the mini-batch is split (nor, with `dp_size`, on how many
data-parallel ranks share it). Without them it normalises by the tensors it is given.
"""

from __future__ import annotations

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum")


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `values * mask`; a NaN or inf where the mask is 0 counts as 0, as in verl (0 * nan would be nan)."""
    weighted = torch.where(mask != 0, values, 0.0) * mask
    return weighted.sum() if dim is None else weighted.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is 1 (0 when the mask is empty)."""
    return masked_sum(values, mask, dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(values - mean) / sqrt(var + 1e-8) over the unmasked entries (unbiased var), 0 where masked."""
    count = mask.sum()
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean).square(), mask)
    if count > 1:
        var = var * count / (count - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8) * mask


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str, dp_size: int = 1,
             batch_num_tokens: float | None = None, global_batch_size: float | None = None,
             loss_scale_factor: float | None = None) -> torch.Tensor:
    """Aggregate per-token losses (batch, response_len) into a scalar (see docs/algorithms.md).

    - token-mean: sum over unmasked tokens / tokens of the mini-batch (`batch_num_tokens`).
    - token-sum: sum over unmasked tokens.
    - seq-mean-token-sum: per-sequence token sums, summed / sequences of the mini-batch
      (`global_batch_size`, counting sequences with at least one unmasked token).
    - seq-mean-token-mean: per-sequence token means, summed / sequences of the mini-batch.
    - seq-mean-token-sum-norm: seq-mean-token-sum / `loss_scale_factor` (default: the response
      width), Dr. GRPO's constant normaliser (arXiv:2503.20783).
    Every mode is multiplied by `dp_size`, because data-parallel gradients are averaged.
    """
    mask = loss_mask.to(loss_mat.dtype)
    if loss_agg_mode == "token-mean":
        tokens = mask.sum() if batch_num_tokens is None else batch_num_tokens
        return masked_sum(loss_mat, mask) / max(float(tokens), 1.0) * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, mask) * dp_size
    seq_tokens = mask.sum(-1)
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = masked_sum(loss_mat, mask, -1)
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_losses = masked_sum(loss_mat, mask, -1) / seq_tokens.clamp(min=1)
    else:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; known: {', '.join(LOSS_AGG_MODES)}")
    sequences = (seq_tokens > 0).sum() if global_batch_size is None else global_batch_size
    loss = seq_losses.sum() / max(float(sequences), 1.0) * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_scale_factor or loss_mask.shape[-1])
    return loss


def batch_entropy(entropy: torch.Tensor, mask: torch.Tensor, loss_agg_mode: str,
                  loss_scale_factor: float | None = None) -> float:
    """verl's actor/entropy: the policy's entropy at the batch's response tokens, aggregated by `loss_agg_mode` over the
    whole batch as one (agg_loss without mini-batch totals: the seq-mean modes count the rows that have a token)."""
    return float(agg_loss(entropy.float(), mask.float(), loss_agg_mode, loss_scale_factor=loss_scale_factor))


def compute_value_loss(vpreds: torch.Tensor, returns: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                       cliprange_value: float, loss_agg_mode: str = "token-mean", dp_size: int = 1,
                       batch_num_tokens: float | None = None, global_batch_size: float | None = None,
                       loss_scale_factor: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss: 0.5 * agg(max((V - G)^2, (clip(V, V_old - c, V_old + c) - G)^2)).

    Returns the loss and the fraction of tokens where the clipped term was larger (vf_clipfrac).
    """
    vpreds_clipped = torch.maximum(torch.minimum(vpreds, values + cliprange_value), values - cliprange_value)
    losses_unclipped = (vpreds - returns).square()
    losses_clipped = (vpreds_clipped - returns).square()
    vf_loss = 0.5 * agg_loss(torch.maximum(losses_unclipped, losses_clipped), response_mask, loss_agg_mode,
                             dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    vf_clipfrac = masked_mean((losses_clipped > losses_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac
