"""Question-answering exact match (Search-R1's data: `searchR1_nq`, `searchR1_hotpotqa`, ...).

The answer is the content of the last `<answer>...</answer>` of the response (spanning lines); it
scores `score` (1.0) when, normalised as SQuAD's evaluation does (lower case, punctuation and the
articles a/an/the removed, spaces collapsed), it equals one of the ground truth's answers, else
`format_score` (0.0); a response without an answer tag scores 0. A right answer in a response with
more than 10 opening or closing answer tags scores a quarter, so repeating tags does not pay. The
ground truth is a dict whose `target` is the list of accepted answers (or one string), as Search-R1's
preprocessing writes it. These are the rules and values of verl's scorer for these data sources.
"""

from __future__ import annotations

import re
import string

SEARCH_R1_DATA_SOURCES = ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                          "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle")
MAX_ANSWER_TAGS = 10
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def extract_answer(solution_str: str) -> str | None:
    """The stripped content of the last `<answer>...</answer>`, or None."""
    matches = _ANSWER.findall(solution_str)
    return matches[-1].strip() if matches else None


def compute_score(solution_str: str, ground_truth, format_score: float = 0.0, score: float = 1.0) -> float:
    """`score` for an exact match with one of `ground_truth["target"]` (a quarter of it past 10 answer tags),
    `format_score` for another answer, 0 without an answer tag."""
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    targets = ground_truth["target"] if isinstance(ground_truth, dict) else ground_truth
    targets = [targets] if isinstance(targets, str) else list(targets)
    if normalize(answer) not in {normalize(str(target)) for target in targets}:
        return format_score
    tags = max(solution_str.count("<answer>"), solution_str.count("</answer>"))
    return score / 4 if tags > MAX_ANSWER_TAGS else score
