"""Which rows each data-parallel rank gets: the layout behind `Dispatch.DP`.

A batch of B rows (B a multiple of the world size W) is cut into blocks of W consecutive rows,
and every rank takes one row of every block, in block order. Rank r's j-th row therefore comes
from block j, so whatever the PPO mini-batch size M (a multiple of W), rank r's k-th local
mini-batch of M / W rows holds one row of each block of the global mini-batch k: the ranks
together train on exactly the rows one process would, mini-batch by mini-batch, and the gradient
of a 2-rank run equals the 1-process one.

Which row of a block goes to which rank is free; with `balance` (verl's `trainer.balance_batch`)
the longest row of each block goes to the rank with the fewest tokens so far, so the ranks' token
counts (and their time per pass) stay close. Without it row r of a block goes to rank r.
"""

from __future__ import annotations

import numpy as np
import torch

from reinforge.batch import Batch


def dp_order(lengths: list[int] | np.ndarray, world_size: int, balance: bool) -> np.ndarray:
    """A permutation of the rows such that `batch.index(order).chunk(world_size)[r]` is rank r's share."""
    lengths = np.asarray(lengths, dtype=np.int64)
    blocks = len(lengths) // world_size
    if blocks * world_size != len(lengths):
        raise ValueError(f"{len(lengths)} rows do not split evenly over {world_size} ranks")
    assignment = np.tile(np.arange(world_size), (blocks, 1))  # assignment[b, r]: the row of block b that rank r takes
    if balance and world_size > 1:
        totals = np.zeros(world_size, dtype=np.int64)
        for block in range(blocks):
            rows = block * world_size + np.arange(world_size)
            longest_first = np.argsort(-lengths[rows], kind="stable")
            lightest_first = np.argsort(totals, kind="stable")
            assignment[block, lightest_first] = longest_first
            totals += lengths[rows[assignment[block]]]
    rows = np.arange(blocks)[:, None] * world_size + assignment  # (blocks, ranks) row indices
    return rows.T.reshape(-1)


def split_for_ranks(batch: Batch, world_size: int, balance: bool) -> tuple[list[Batch], np.ndarray, int]:
    """Rank pieces of `batch`, the order they were taken in, and how many padding rows were added.

    A batch whose length is not a multiple of the world size (a validation batch) is padded by
    repeating its last rows; `gather_from_ranks` drops them again."""
    pad = -len(batch) % world_size
    if pad:
        batch = Batch.concat([batch, batch.index(np.arange(len(batch) - pad, len(batch)) % len(batch))])
    lengths = batch["attention_mask"].sum(-1).numpy() if balance and "attention_mask" in batch else np.zeros(len(batch))
    order = dp_order(lengths, world_size, balance)
    return batch.index(order).chunk(world_size), order, pad


def gather_from_ranks(results: list, order: np.ndarray, pad: int):
    """The ranks' results back in the caller's row order, padding removed; results that are not row-aligned
    Batches (metrics, None) come back as rank 0's Batch or the list of results."""
    if not isinstance(results[0], Batch):
        return results
    merged = Batch.concat(results)
    if len(merged) != len(order):  # metrics-only results (updates): rank 0's
        return merged
    inverse = torch.as_tensor(np.argsort(order))
    merged = merged.index(inverse)
    return merged.index(slice(0, len(merged) - pad)) if pad else merged
