"""DAPO's dynamic sampling filter (arXiv:2503.14476): which prompt groups carry a learning signal.

A group whose responses all score the same has zero advantage under every group baseline, so
it only dilutes the batch. `keep_groups` marks the rows of the groups to keep.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def keep_groups(index, values, filter_type: str = "same_value", tolerance: float = 1e-6,
                lower_bound: float | None = None, upper_bound: float | None = None) -> np.ndarray:
    """Boolean row mask: rows of the groups (by `index`, the prompt uid) that pass the filter.

    - same_value: keep a group when its metric varies: max - min > `tolerance` (a group of one
      has no spread and is dropped).
    - band_pass: keep a group when its mean metric lies in [lower_bound, upper_bound] (None: no bound).
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
            mean = group.mean()
            passed = (lower_bound is None or mean >= lower_bound) and (upper_bound is None or mean <= upper_bound)
        else:
            raise ValueError(f"unknown filter_groups.filter_type {filter_type!r}; known: same_value, band_pass")
        keep[members] = passed
    return keep
