"""MATH scorer: boxed-answer extraction, normalisation, score values."""

import pytest

from reinforge.reward.scorers.math import compute_score, last_boxed_answer, normalize_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{5} and finally \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{\{1, 2\} \cup \{x^{2}\}}", r"\{1, 2\} \cup \{x^{2}\}"),
        (r"the answer is $\boxed 7$.", "7"),
        (r"\fbox{3}", "3"),
        (r"\boxed {4}", "4"),
        (r"\boxed{3", None),
        ("no box at all", None),
    ],
)
def test_last_boxed_answer(text, expected):
    assert last_boxed_answer(text) == expected


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (r"\frac12", r"\frac{1}{2}"),
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\tfrac{1}{2}", "1/2"),
        ("0.5", r"\frac{1}{2}"),
        (".5", "0.5"),
        (r"\frac{3}{4}", "3/4"),
        (r"-\frac{3}{4}", "-3/4"),
        ("x = 5", "5"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"90^\circ", "90"),
        (r"90^{\circ}", "90"),
        (r"\$5", "5"),
        ("$5$", "5"),
        (r"10\text{ cm}", "10"),
        (r"50\%", "50"),
        ("7.", "7"),
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        ("2.50", "2.5"),
        ("3.0", "3"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"\text{(A)}", "A"),
        (r"\textbf{B}", "(B)"),
        (r"2\!\cdot\!3", r"2\cdot3"),
    ],
)
def test_normalisation_makes_equal(left, right):
    assert normalize_answer(left) == normalize_answer(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("2", "3"),
        (r"\frac{1}{3}", "0.33"),
        ("f(x) = x + 1", "x + 1"),  # a long left-hand side is part of the answer
        (r"\rightarrow", "arrow"),  # \right is only removed as a delimiter
        ("(1,2)", "[1,2]"),
    ],
)
def test_normalisation_keeps_different(left, right):
    assert normalize_answer(left) != normalize_answer(right)


def test_scores():
    assert compute_score(r"Thus \boxed{\dfrac{1}{2}}.", r"\frac{1}{2}") == 1.0
    assert compute_score(r"Thus \boxed{\frac{1}{3}}.", r"\frac{1}{2}") == 0.0
    assert compute_score("The answer is 1/2", r"\frac{1}{2}") == 0.0


def test_multiple_choice_text_answer():
    assert compute_score(r"\boxed{\text{(A)}}", "A") == 1.0
    assert compute_score(r"\boxed{\text{(A)}}", "(B)") == 0.0


def test_ground_truth_may_be_boxed():
    assert compute_score(r"\boxed{12}", r"The total is $\boxed{12}$.") == 1.0
    assert compute_score(r"\boxed{13}", r"\boxed{12}") == 0.0
