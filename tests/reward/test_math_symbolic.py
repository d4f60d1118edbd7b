"""The math scorers' symbolic stage (math-verify), DAPO-Math's +1/-1 scorer, and their routing."""

import threading
import time

import pytest

from reinforge.reward import default_compute_score
from reinforge.reward.scorers import math as math_scorer
from reinforge.reward.scorers.math import compute_score, symbolic_equal
from reinforge.reward.scorers.math_dapo import compute_score as dapo_score


@pytest.mark.parametrize(
    ("solution", "truth"),
    [
        (r"so $\boxed{\frac{\sqrt{2}}{2}}$", r"\frac{1}{\sqrt{2}}"),  # equal only after rationalising
        (r"\boxed{0.25}", r"\frac14"),  # decimal against a fraction (the string stage knows only 0.5)
        (r"\boxed{\dfrac{3}{8}}", "0.375"),
        (r"\boxed{(x+1)^2}", "x^2+2x+1"),
        (r"\boxed{\{2, 1\}}", r"\{1,2\}"),  # a set in another order
        (r"\boxed{2\pi}", r"\pi \cdot 2"),
        (r"\boxed{-5}", "-5.0"),
        (r"\boxed{\frac{-1}{2}}", r"-\frac{1}{2}"),
        (r"\boxed{\left[ 1, \frac{3}{2} \right)}", r"[1, 1.5)"),
    ],
)
def test_symbolically_equal_answers_score_one(solution, truth):
    assert compute_score(solution, truth) == 1.0


@pytest.mark.parametrize(
    ("solution", "truth"),
    [
        (r"\boxed{\frac{1}{3}}", "0.33"),  # a rounded decimal is not the fraction
        (r"\boxed{(1,2)}", "[1,2]"),  # an open interval is not a closed one
        (r"\boxed{x^2+2x}", "(x+1)^2"),
        (r"\boxed{-5}", "5"),
        (r"the answer is \frac{1}{2}", r"\frac{1}{2}"),  # not boxed
    ],
)
def test_different_answers_score_zero(solution, truth):
    assert compute_score(solution, truth) == 0.0


def test_nested_braces_in_boxed_answer():
    assert compute_score(r"We get \boxed{\frac{\sqrt{3}}{\left(2+1\right)}}.", r"\frac{\sqrt{3}}{3}") == 1.0
    assert compute_score(r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}") == 1.0


def test_string_stage_answers_without_math_verify(monkeypatch):
    calls = []
    monkeypatch.setattr(math_scorer, "symbolic_equal", lambda *a, **k: calls.append(a))
    assert compute_score(r"\boxed{\dfrac{1}{2}}", "0.5") == 1.0  # equal as strings: no symbolic call
    assert calls == []
    assert compute_score(r"\boxed{0.25}", r"\frac14") == 0.0  # symbolic stage unavailable (returns None)
    assert len(calls) == 1


def test_timeout_scores_timeout_score(monkeypatch):
    def slow(*args, **kwargs):
        raise math_scorer.SymbolicTimeout("Operation timed out!")

    monkeypatch.setattr(math_scorer, "symbolic_equal", slow)
    assert compute_score(r"\boxed{0.25}", r"\frac14") == 0.0
    assert compute_score(r"\boxed{0.25}", r"\frac14", timeout_score=-1.0) == -1.0


def test_symbolic_timeout_is_enforced_on_the_main_thread():
    # a power tower sympy cannot settle quickly; math-verify's alarm must cut it off
    started = time.perf_counter()
    with pytest.raises(math_scorer.SymbolicTimeout):
        symbolic_equal("2^{2^{2^{2^{2^{2}}}}}", "3^{3^{3^{3^{3}}}}", timeout_s=1)
    assert time.perf_counter() - started < 10
    assert compute_score(r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", "3^{3^{3^{3^{3}}}}", timeout_s=1, timeout_score=-0.5) == -0.5


def test_a_parse_that_runs_out_of_time_scores_timeout_score(monkeypatch):
    """math-verify's own parse, its extraction slowed past the limit: its alarm fires inside parse, which returns []
    (read as unparsable: 0.0) unless asked to raise."""
    from math_verify import parser

    extract = parser.extract_target_from_pred

    def slow_extract(*args, **kwargs):
        time.sleep(3)
        return extract(*args, **kwargs)

    monkeypatch.setattr(parser, "extract_target_from_pred", slow_extract)
    with pytest.raises(math_scorer.SymbolicTimeout):
        symbolic_equal("0.25", r"\frac14", timeout_s=1)
    assert compute_score(r"\boxed{0.25}", r"\frac14", timeout_s=1, timeout_score=-0.5) == -0.5


def test_symbolic_stage_works_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(compute_score(r"\boxed{0.25}", r"\frac14")))
    thread.start()
    thread.join(30)
    assert results == [1.0]


@pytest.mark.parametrize(
    ("solution", "truth", "score", "pred"),
    [
        ("Working...\nAnswer: 42", "42", 1.0, "42"),
        ("Answer: 41", "42", -1.0, "41"),
        ("no final line", "42", -1.0, "[INVALID]"),
        (r"Answer: $\frac{1}{2}$", "0.5", 1.0, r"\frac{1}{2}"),
        (r"Answer: $\boxed{1,000}$", "1000", 1.0, "1000"),
        ("answer: 3\nthen Answer: -7", "-7", 1.0, "-7"),  # the last one counts, case-insensitive
        # verl 0.9.1's own results on these (its math_dapo.compute_score, run side by side): Minerva's normaliser keeps
        # the last right-hand side and drops unit words and filler; without an Answer: line, the last box
        ("Answer: 72 dollars", "72", 1.0, "72"),
        ("Final Answer: The final answer is $72$. I hope it is correct.", "72", 1.0, "72"),
        ("Answer: x = 3, y = 4", "4", 1.0, "4"),
        (r"So it is $\boxed{72}$.", "72", 1.0, "72"),
        (r"\boxed{71}", "72", -1.0, "71"),
        # where verl's string comparison says -1 and the MATH scorer's comparison finds them equal (documented)
        ("Answer: 72.0", "72", 1.0, "72.0"),
    ],
)
def test_dapo_math_scores_plus_or_minus_one(solution, truth, score, pred):
    result = dapo_score(solution, truth)
    assert result == {"score": score, "acc": score > 0, "pred": pred}


def test_dapo_math_reads_only_the_last_300_characters():
    assert dapo_score("Answer: 5" + "\nfiller" * 42, "5")["score"] == -1.0  # the answer starts 303 characters back
    assert dapo_score("Answer: 5" + "\nfiller" * 41, "5")["score"] == 1.0  # 296
    assert dapo_score("Answer: 5" + "\nfiller" * 42, "5")["pred"] == "[INVALID]"


def test_dapo_math_strict_box_compares_the_last_box_of_100_characters_exactly():
    assert dapo_score(r"blah \boxed{5}", "5", strict_box_verify=True) == {"score": 1.0, "acc": True, "pred": "5"}
    # verl's strict mode: no normalisation, no symbolic stage
    assert dapo_score(r"\boxed{0.5}", r"\frac{1}{2}", strict_box_verify=True) == {"score": -1.0, "acc": False, "pred": "0.5"}
    assert dapo_score(r"\boxed{5}" + " filler" * 13, "5", strict_box_verify=True) == {"score": 1.0, "acc": True, "pred": "5"}
    assert dapo_score(r"\boxed{5}" + " filler" * 14, "5", strict_box_verify=True) == {  # the box starts 107 characters back
        "score": -1.0, "acc": False, "pred": "[INVALID]"}


@pytest.mark.parametrize(
    ("data_source", "solution", "truth", "expected"),
    [
        ("openai/gsm8k", "so\n#### 1,200", "1200", 1.0),
        ("DigitalLearningGmbH/MATH-lighteval", r"\boxed{0.25}", r"\frac14", 1.0),
        ("HuggingFaceH4/MATH-500", r"\boxed{3}", "4", 0.0),
        ("numina_olympiads", r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{\sqrt2}{2}", 1.0),
        ("math_dapo", "Answer: 3", "3", {"score": 1.0, "acc": True, "pred": "3"}),
        ("aime2024", "Answer: 3", "4", {"score": -1.0, "acc": False, "pred": "3"}),
        ("countdown", "<answer>(3 - 1) * 4</answer>", {"target": 8, "numbers": [1, 3, 4]}, 1.0),
    ],
)
def test_default_compute_score_routes_verl_data_sources(data_source, solution, truth, expected):
    assert default_compute_score(data_source, solution, truth) == expected
