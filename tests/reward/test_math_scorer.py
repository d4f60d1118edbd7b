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
        # verl's order: any `\boxed <answer>` wins, then the last `\boxed{}`, and `\fbox{}` only without a `\boxed`
        (r"So $\boxed 7$. Check: \boxed{5}", "7"),
        (r"\boxed{7} \fbox{5}", "7"),
    ],
)
def test_last_boxed_answer(text, expected):
    assert last_boxed_answer(text) == expected


@pytest.mark.parametrize(  # each scored as verl 0.9.1's default_compute_score scores it (run on these cases)
    ("data_source", "solution", "ground_truth", "score"),
    [
        ("HuggingFaceH4/MATH-500", r"So $\boxed 7$. Check: \boxed{5}", "7", 1.0),
        ("HuggingFaceH4/MATH-500", r"\boxed{7} \fbox{5}", "7", 1.0),
        ("lighteval/MATH", r"The area is $\boxed{5\text{ cm}.}$", "5", 1.0),  # a unit: from `\text{ ` on
        ("lighteval/MATH", r"\boxed{12\text{ inches}.}", r"12\text{ inches}", 1.0),
        ("lighteval/MATH", r"\boxed{\text{(B)}}", r"\text{(B)}\text{ cm}^2", 1.0),
        ("math_dapo", r"The answer is \boxed{42}. \boxed", "42", 1.0),  # DAPO reads the last `\boxed{` only
        ("aime2024", r"\boxed{204} so \boxed 5$", "204", 1.0),
        ("math_dapo", r"\boxed{204} so \boxed 5$", "5", -1.0),
    ],
)
def test_answers_are_found_where_verl_finds_them(data_source, solution, ground_truth, score):
    from reinforge.reward.registry import default_compute_score

    result = default_compute_score(data_source, solution, ground_truth)
    assert (result["score"] if isinstance(result, dict) else result) == score


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
