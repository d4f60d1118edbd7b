"""Search-R1's exact-match scorer (searchR1_* data sources): cases worked out by hand from its rules."""

import numpy as np
import pytest

from reinforge.reward import default_compute_score
from reinforge.reward.scorers.qa_em import normalize


@pytest.mark.parametrize(("solution", "targets", "score"), [
    ("<think>...</think><answer>Paris</answer>", ["Paris"], 1.0),
    ("<answer>The  Paris.</answer>", ["paris"], 1.0),  # case, punctuation, the article and spacing are normalised away
    ("<answer>Paris</answer> then <answer>\nLondon\n</answer>", ["London"], 1.0),  # the last tag, across lines
    ("<answer>Paris</answer> then <answer>London</answer>", ["Paris"], 0.0),
    ("<answer>Paris, France</answer>", ["Paris"], 0.0),  # exact match, not a substring
    ("Paris", ["Paris"], 0.0),  # no answer tag
    ("<answer>Paris</answer>" * 11, ["Paris"], 0.25),  # more than 10 tags: a quarter
    ("<answer>Paris</answer>" * 10, ["Paris"], 1.0),
    ("<answer>Lyon</answer>" * 11, ["Paris"], 0.0),
    ("<answer>x-ray</answer>", np.array(["Rome", "xray"]), 1.0),  # any target; a parquet list arrives as an array
])
def test_search_r1_exact_match(solution, targets, score):
    for source in ("searchR1_nq", "searchR1_hotpotqa", "searchR1_bamboogle"):
        assert default_compute_score(source, solution, {"target": targets}) == score


def test_normalize_is_squads():
    assert normalize("  The Eiffel-Tower, an ICON! ") == "eiffeltower icon"
    assert normalize("a") == ""


def test_an_unknown_data_source_is_verls_not_implemented_error_too():
    """verl's default_compute_score raises NotImplementedError there; a custom function that catches it to score
    such rows itself must work with reinforge's too, which stays a RewardError that names the built-in scorers."""
    from reinforge.errors import RewardError

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        try:
            return default_compute_score(data_source, solution_str, ground_truth, extra_info)
        except NotImplementedError:
            return 0.5

    assert compute_score("lab/puzzles", "x", "y") == 0.5
    with pytest.raises(RewardError, match="no reward function for data_source 'lab/puzzles'. Built-in scorers exist for"):
        default_compute_score("lab/puzzles", "x", "y")
