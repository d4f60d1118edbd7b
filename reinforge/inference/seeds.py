"""Counter-based randomness for sampling: numbers that depend on (seed, position) only.

A response's tokens must not depend on which other rows share its batch or on which process
generates it: a data-parallel run, where each rank generates its own share of the rows, has to
sample exactly what one process samples. One RNG stream over the whole batch cannot do that
(a row's draws depend on how many draws the rows before it took). So, as vLLM's per-request
`seed` does, each row carries its own seed and the engine draws the uniform number for the
token at position t of that row from a hash of (seed, t): splitmix64, whose output passes the
usual statistical test batteries and costs a few integer operations per draw.

The trainer gives every row a seed with `row_seeds`, a hash of (trainer.seed, train or
validation, step, generation round, row index in the step's batch), so the seeds follow from
the step and an exactly resumed run samples what the straight run samples.
"""

from __future__ import annotations

import numpy as np
import torch

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1

TRAIN, VALIDATION = 0, 1  # the purpose a row's seed is drawn for (the second part of its key)
RESAMPLE = 2  # the trainer's per-step draw of algorithm.use_pf_ppo
BASELINE = 3  # ReMax's greedy baseline rows (greedy, but a generative reward model samples its verdicts on them)
# derived from a row's own seed, derive_seed(row seed, part): agent turn t takes part t >= 0 (inference/agent/base.py),
# a generative reward model's verdict on the row part VERDICT, which no turn takes
VERDICT = -1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Steele, Lea and Flood's splitmix64 finaliser of x + gamma (uint64 in, uint64 out, wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + _GAMMA
        z = (z ^ (z >> np.uint64(30))) * _MUL1
        z = (z ^ (z >> np.uint64(27))) * _MUL2
        return z ^ (z >> np.uint64(31))


def _as_uint64(values) -> np.ndarray:
    """Python ints of any sign as their 64-bit two's-complement pattern."""
    return np.array([int(v) & _MASK64 for v in values], dtype=np.uint64)


def _fold(parts) -> np.ndarray:
    state = np.uint64(0)
    for part in _as_uint64(parts):
        state = splitmix64(state ^ part)
    return state


def derive_seed(*parts: int) -> int:
    """A seed (0 <= seed < 2**63, so it fits an int64 tensor) hashed from integer parts; each part changes it."""
    return int(_fold(parts) >> np.uint64(1))


def row_seeds(rows: int, *parts: int) -> torch.Tensor:
    """(rows,) int64: derive_seed(*parts, i) for each row index i."""
    seeds = splitmix64(_fold(parts) ^ np.arange(rows, dtype=np.uint64)) >> np.uint64(1)
    return torch.from_numpy(seeds.astype(np.int64))


def uniforms(seeds: list[int], steps: int) -> np.ndarray:
    """(len(seeds), steps) float64 in [0, 1): the number for token position t of the row with each seed."""
    keys = splitmix64(_as_uint64(seeds))[:, None]
    with np.errstate(over="ignore"):
        bits = splitmix64(keys + np.arange(steps, dtype=np.uint64)[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53  # the top 53 bits: every double in [0, 1) on the grid


CDF_BLOCK = 256  # vocabulary entries per block of the two-level inverse CDF


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token ids (rows,) drawn from `probs` (rows, vocab; rows need not sum to 1) by inverting the CDF at `u` (rows,).

    The CDF is taken in two levels: the sums of blocks of CDF_BLOCK entries and their running total (float64) pick a
    row's block, and the running sum (float64) inside that one block picks its token. It is the inversion of one
    cumulative sum over the whole vocabulary, a token's chance being its probability up to the float32 rounding of
    its block's sum (the rounding `probs` already carries), and a token of probability 0 (filtered out by
    top-k/top-p) is never picked; at a fraction of the cost: a float64 cumulative sum over the vocabulary runs on one
    thread, and with its float64 copy took 1.4 ms per decoding step for 64 rows of a 32k vocabulary (6 ms inside the
    engine's loop) against 0.4 ms for the two levels.
    """
    vocab = probs.shape[-1]
    full = vocab // CDF_BLOCK * CDF_BLOCK
    block_sums = probs[:, :full].unflatten(-1, (full // CDF_BLOCK, CDF_BLOCK)).sum(-1)  # float32: a float64 sum is 7x slower
    if full < vocab:  # the last, shorter block
        block_sums = torch.cat([block_sums, probs[:, full:].sum(-1, keepdim=True)], -1)
    block_cdf = block_sums.double().cumsum(-1)
    total = block_cdf[:, -1]
    target = torch.minimum(u.to(block_cdf) * total, torch.nextafter(total, torch.zeros_like(total)))  # < total
    block = torch.searchsorted(block_cdf, target[:, None], right=True).clamp(max=block_cdf.shape[-1] - 1)  # (rows, 1)
    before = torch.nn.functional.pad(block_cdf, (1, 0)).gather(-1, block).squeeze(-1)  # the mass of the blocks before it
    columns = block * CDF_BLOCK + torch.arange(CDF_BLOCK, device=probs.device)  # the entries of each row's block
    inside = probs.gather(-1, columns.clamp(max=vocab - 1)).masked_fill(columns >= vocab, 0).double().cumsum(-1)
    # target - before >= 0; below the block's own running total (the two sums may round apart), so the entry picked has
    # probability > 0
    within = torch.minimum(target - before, torch.nextafter(inside[:, -1], torch.zeros_like(total)))
    return columns[:, 0] + torch.searchsorted(inside, within[:, None], right=True).squeeze(-1)
