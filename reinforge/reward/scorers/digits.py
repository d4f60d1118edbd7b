"""Scorer of the built-in digit task (`reinforge/add_one`, the quickstart's task).

The ground truth is a string of digits such as "4256". The score is the fraction of positions
where the response's digits match the expected ones, divided by the longer of the two digit
sequences, so both missing and surplus digits cost. Non-digit characters are ignored.
"""

from __future__ import annotations

import re


def compute_score(solution_str: str, ground_truth: str) -> float:
    expected = re.findall(r"\d", str(ground_truth))
    got = re.findall(r"\d", solution_str)
    if not expected:
        return 0.0
    hits = sum(a == b for a, b in zip(got, expected, strict=False))
    return hits / max(len(expected), len(got))
