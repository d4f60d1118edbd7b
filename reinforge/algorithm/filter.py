"""Which trajectories a step trains on.

DAPO's dynamic sampling filter (arXiv:2503.14476): a group whose responses all score the same has
zero advantage under every group baseline, so it only dilutes the batch; `keep_groups` marks the
rows of the groups to keep. PF-PPO's policy filtration (arXiv:2409.06957, verl's
`algorithm.use_pf_ppo`): `pf_ppo_resample` redraws the batch with replacement, favouring the
responses whose scores the reward model is surest of.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

PF_PPO_METHODS = ("pow", "max_min", "max_random")
SUMMED_REWARD = ("seq_reward", "reward")  # filter_groups.metric naming the summed pre-KL reward (verl's recipe; its v1 name)
BOUND_TOLERANCE = 1e-7  # band_pass: a mean within this of a bound counts as on it, as verl's filter


def keep_groups(index, values, filter_type: str = "same_value", tolerance: float = 1e-6,
                lower_bound: float | None = None, upper_bound: float | None = None) -> np.ndarray:
    """Boolean row mask: rows of the groups (by `index`, the prompt uid) that pass the filter.

    - same_value: keep a group when its metric varies: max - min > `tolerance` (a group of one
      has no spread and is dropped).
    - band_pass: keep a group when its mean metric lies in [lower_bound, upper_bound] (None: no bound), to within
      BOUND_TOLERANCE.
    """
    values = np.asarray(values, dtype=float)
    rows: dict[object, list[int]] = defaultdict(list)
    for row, uid in enumerate(index):
        rows[uid].append(row)
    keep = np.zeros(len(values), dtype=bool)
    for members in rows.values():
        group = values[members]
        if filter_type == "same_value":
            passed = group.max() - group.min() > tolerance
        elif filter_type == "band_pass":
            mean = group.mean()  # verl's bounds tolerance: a mean of 0.7 and 0.1 (0.39999999999999997) is in [0.4, ...]
            passed = ((lower_bound is None or mean >= lower_bound - BOUND_TOLERANCE)
                      and (upper_bound is None or mean <= upper_bound + BOUND_TOLERANCE))
        else:
            raise ValueError(f"unknown filter_groups.filter_type {filter_type!r}; known: same_value, band_pass")
        keep[members] = passed
    return keep


def pf_ppo_resample(scores: torch.Tensor, reweight_method: str = "pow", weight_pow: float = 2.0,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """As many row indices as `scores` (one per trajectory), drawn with replacement in proportion to a weight
    per row plus 1e-8: pow |score|^weight_pow; max_min 1 for the batch's highest and lowest score, else 0;
    max_random 0.4 for the highest, else 0.1."""
    scores = scores.double()
    if reweight_method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif reweight_method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).double()
    elif reweight_method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1).double()
    else:
        raise ValueError(f"unknown pf_ppo.reweight_method {reweight_method!r}; known: {', '.join(PF_PPO_METHODS)}")
    return torch.multinomial(weights + 1e-8, len(scores), replacement=True, generator=generator)
