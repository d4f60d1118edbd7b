"""Countdown scorer: equation extraction, number use, safe evaluation, score values."""

import pytest

from reinforge.reward.scorers.countdown import compute_score, evaluate_equation, extract_solution, uses_numbers_exactly

TRUTH = {"target": 24, "numbers": [2, 3, 4]}


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("<think>try</think> <answer>2 * 3 * 4</answer>", 1.0),
        ("<answer>4 * (3 * 2)</answer>", 1.0),
        ("<answer>2 * 3 + 4</answer>", 0.1),  # uses every number but misses the target
        ("<answer>2 * 3 * 4 * 1</answer>", 0.1),  # a number that was not given
        ("<answer>4 * 3 * 2 * 2 / 2</answer>", 0.1),  # reuses numbers
        ("<answer>4 * 6</answer>", 0.1),  # misses 2 and 3
        ("<answer>2 ** 3 * 4</answer>", 0.1),  # power is not an allowed operation
        ("<answer>abs(2) * 3 * 4</answer>", 0.1),  # invalid characters
        ("<answer>2 * 3 * 4)</answer>", 0.1),  # does not parse
        ("2 * 3 * 4 = 24", 0.0),  # no answer tag
        ("<answer>  </answer>", 0.0),  # empty answer
    ],
)
def test_scores(solution, expected):
    assert compute_score(solution, TRUTH) == expected


def test_division_within_tolerance():
    truth = {"target": 16, "numbers": [4, 1, 3, 4]}
    assert compute_score("<answer>4 / (1 - 3 / 4)</answer>", truth) == 1.0


def test_division_by_zero_is_format_score():
    truth = {"target": 1, "numbers": [1, 2, 2]}
    assert compute_score("<answer>1 / (2 - 2)</answer>", truth) == 0.1


def test_last_answer_wins_and_prompt_is_dropped():
    prompt = "User: e.g. <answer> (1 + 2) / 3 </answer>. Assistant: "
    assert extract_solution(prompt + "<answer>2*3*4</answer>") == "2*3*4"
    assert extract_solution("<answer>1</answer> no, <answer>4*3*2</answer>") == "4*3*2"
    assert extract_solution("<|im_start|>user <answer>9</answer><|im_start|>assistant <answer>1+1</answer>") == "1+1"


def test_ground_truth_from_parquet_arrays_and_custom_scores():
    import numpy as np

    truth = {"target": np.int64(24), "numbers": np.array([2, 3, 4])}
    assert compute_score("<answer>2*3*4</answer>", truth, format_score=0.2, score=2.0) == 2.0
    assert compute_score("<answer>2*3+4</answer>", truth, format_score=0.2, score=2.0) == 0.2


def test_evaluator_has_no_builtins():
    assert evaluate_equation("__import__('os')") is None
    assert evaluate_equation("(1 + 2) * 3") == 9.0
    assert evaluate_equation("-3 + 5") == 2.0


def test_answers_too_deep_or_too_long_to_evaluate_get_the_format_score():
    truth = {"target": 24, "numbers": [2, 3, 4]}
    assert compute_score("<answer>" + "-" * 5000 + "2*3*4</answer>", truth) == 0.1  # RecursionError when parsed
    assert compute_score("<answer>" + "(" * 300 + "2*3*4" + ")" * 300 + "</answer>", truth) == 0.1
    assert compute_score("<answer>2*3*4+" + "9" * 5000 + "</answer>", truth) == 0.1  # past int()'s 4300 digits
    assert uses_numbers_exactly("(02 + 3) * 4", [2, 3, 4])  # numbers compare as numbers
