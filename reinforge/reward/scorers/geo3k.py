"""Geometry3K scorer (`hiyouga/geometry3k`, verl's vision-language example task): format and answer.

As verl's: the response's format counts 0.1 when it is `<think>...</think>` followed by an answer in `\\boxed{...}`
(anything may come between and after), and its answer 0.9 when the content of its last `\\boxed{}` equals the ground
truth. verl compares with mathruler's `grade_answer`; reinforge with its MATH comparison (`math.py`: the normalised
strings, then math-verify's symbolic equality), which takes the same answers as equal in Geometry3K's forms (integers,
decimals, fractions, roots, `\\pi` multiples) and a few more (`0.5` and `\\frac{1}{2}`). The score is 0.0, 0.1, 0.9
or 1.0.
"""

from __future__ import annotations

import re

from reinforge.reward.scorers import math

FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)
FORMAT_WEIGHT = 0.1


def format_reward(solution_str: str) -> float:
    """1.0 when the response thinks in <think></think> and then boxes an answer, else 0.0."""
    return 1.0 if FORMAT.fullmatch(solution_str.strip()) else 0.0


def acc_reward(solution_str: str, ground_truth: str) -> float:
    """1.0 when the content of the last `\\boxed{}` is the ground truth (math.py's comparison), else 0.0."""
    return math.compute_score(solution_str, ground_truth)


def compute_score(solution_str: str, ground_truth: str) -> float:
    return (1 - FORMAT_WEIGHT) * acc_reward(solution_str, ground_truth) + FORMAT_WEIGHT * format_reward(solution_str)
