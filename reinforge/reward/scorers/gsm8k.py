"""GSM8K scorer: extract the final number of a solution and compare it to the ground truth.

Two extraction modes, as in verl:

- strict: the last `#### <number>` in the solution (the GSM8K answer format);
- flexible: the last run of digits, `.`, `,` and `-` anywhere in the solution that is not a bare
  `.` (a sentence's full stop), taken as it stands: "1,000" does not match "1000" there, as in verl.

Only the last 300 characters are searched, so a long chain of thought cannot hide a stray
"#### 3" early on. Thousands separators and `$` are removed from the strict answer; the
comparison with the ground truth is then exact string equality (no numeric tolerance: "72.0"
does not match "72"), as verl's. The ground truth is taken as a string without surrounding spaces
(and, for the strict answer, without separators and `$`), so an int or `" 72 "` (or `"1,000"` in
strict mode) matches where verl's comparison with the value as given never does; for GSM8K's own
answers (plain digit strings) the scores are verl's.
"""

from __future__ import annotations

import re

SOLUTION_CLIP_CHARS = 300

_STRICT_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_ANY_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer string, or None when the solution has none in the given mode."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        matches = _STRICT_ANSWER.findall(tail)
        return _clean(matches[-1]) if matches else None
    candidates = _ANY_NUMBER.findall(tail)  # verl's: the last that is not a bare ".", as it stands (no cleaning)
    return next((c for c in reversed(candidates) if c != "."), candidates[0]) if candidates else None


def _clean(number: str) -> str:
    return number.replace(",", "").replace("$", "")


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` when the extracted answer equals `ground_truth`, `format_score` when an answer was
    extracted but differs, 0 when no answer could be extracted."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    truth = str(ground_truth).strip()
    return score if answer == (_clean(truth) if method == "strict" else truth) else format_score


def score_answer(answer: str, ground_truth: str | None) -> float:
    """1.0 when a submitted answer (a tool argument, a chat turn) is right, else 0.0, as verl's Gsm8kTool and
    Gsm8kInteraction score it: "#### " put in front unless it starts so, then the flexible extraction (the last number)."""
    return compute_score(answer if answer.startswith("#### ") else "#### " + answer, ground_truth, method="flexible")
