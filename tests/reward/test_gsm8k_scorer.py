"""GSM8K scorer: strict and flexible extraction, score values."""

import pytest

from reinforge.reward.scorers.gsm8k import compute_score, extract_solution


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("She pays 3 * 24 = 72 dollars.\n#### 72", "72"),
        ("Total is 1,234 apples\n#### 1,234", "1234"),
        ("The change is -5\n#### -5", "-5"),
        ("#### 3 first, then corrected: #### 4", "4"),
        ("#### 2.5", "2.5"),
        ("The answer is 72", None),
        ("####72", None),
    ],
)
def test_strict_extracts_last_hash_answer(solution, expected):
    assert extract_solution(solution, "strict") == expected


def test_strict_only_searches_last_300_characters():
    early_answer = "#### 7 " + "x" * 400
    assert extract_solution(early_answer, "strict") is None
    assert extract_solution("x" * 400 + " #### 7", "strict") == "7"


@pytest.mark.parametrize(  # the values of verl 0.9.1's extract_solution(solution, "flexible"), run on each solution
    ("solution", "expected"),
    [
        ("so the answer is 72.", "72."),
        ("3 + 4 = 7. Done...", "..."),
        ("costs $1,500 in total", "1,500"),
        ("temperature fell to -3 degrees", "-3"),
        ("no digits here.", "."),
        ("#### ,", ","),
        ("no number at all", None),
    ],
)
def test_flexible_extracts_the_last_run_of_number_characters_as_verl(solution, expected):
    assert extract_solution(solution, "flexible") == expected


def test_scores_correct_wrong_and_missing():
    assert compute_score("#### 72", "72") == 1.0
    assert compute_score("#### 71", "72") == 0.0
    assert compute_score("#### 71", "72", format_score=0.1) == 0.1
    assert compute_score("I think 72", "72", format_score=0.1) == 0.0
    assert compute_score("#### 72", "72", score=2.0) == 2.0


def test_commas_in_answer_and_ground_truth_are_ignored():
    assert compute_score("#### 1,000", "1000") == 1.0
    assert compute_score("#### 1000", "1,000") == 1.0


def test_strict_versus_flexible():
    solution = "The result is 18"
    assert compute_score(solution, "18", method="strict") == 0.0
    assert compute_score(solution, "18", method="flexible") == 1.0


def test_comparison_is_exact_string_equality_like_verl():
    assert compute_score("#### 72.0", "72") == 0.0


def test_unknown_method_is_rejected():
    with pytest.raises(ValueError, match="strict"):
        compute_score("#### 1", "1", method="loose")


def test_dollar_signs_and_negative_numbers():
    # strict mode follows verl: "#### $72" has no number right after "#### ", so no answer
    assert compute_score("#### $72", "72") == 0.0
    assert compute_score("It costs $72 in total.", "72", method="flexible") == 1.0
    assert compute_score("The temperature is\n#### -12", "-12") == 1.0
    assert compute_score("#### 12", "-12") == 0.0
    assert compute_score("so the loss is -1,250 dollars", "-1250", method="flexible") == 0.0  # verl 0.9.1: 0 (commas kept)
    assert compute_score("so the loss is -1,250 dollars", "-1,250", method="flexible") == 1.0
