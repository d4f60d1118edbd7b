"""DAPO-Math scorer: the answer after the last `Answer:` of a solution, scored +1 / -1.

For DAPO's math data (`data_source` `math_dapo`, `math`, `math_dapo_reasoning`, `aime*`), whose
prompts end "... The last line of your response should be of the form Answer: $Answer". As in
verl, only the last 300 characters are searched, the result is a dict
`{"score": 1.0 | -1.0, "acc": bool, "pred": str}` (a wrong or missing answer costs -1, not 0), and
`pred` is the normalised answer (`"[INVALID]"` when there is none), so validation can take a
majority vote over it.

Answers are compared like the MATH scorer: string-normalised first, then symbolically with
math-verify (verl compares Minerva-normalised strings only). With `strict_box_verify=True`, as
in verl, the answer is instead the last `\\boxed{}` of the last 100 characters, compared with the
ground truth exactly as written, and `pred` is that box's content.
"""

from __future__ import annotations

import re

from reinforge.reward.scorers.math import SymbolicTimeout, is_equiv, last_boxed_answer, normalize_answer, symbolic_equal

SOLUTION_CLIP_CHARS = 300
STRICT_BOX_CHARS = 100
INVALID = "[INVALID]"
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")


def extract_answer(solution_str: str, strict_box_verify: bool = False) -> str | None:
    """The raw answer: after the last `Answer:` of the last 300 characters, or the last box of the last 100."""
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    if strict_box_verify:
        return last_boxed_answer(tail[-STRICT_BOX_CHARS:])
    matches = _ANSWER_LINE.findall(tail)
    if not matches:
        return None
    answer = matches[-1].strip()
    boxed = last_boxed_answer(answer)  # "Answer: $\boxed{5}$" is common
    return boxed if boxed is not None else answer


def compute_score(
    solution_str: str, ground_truth: str, strict_box_verify: bool = False, timeout_s: int | None = 5
) -> dict[str, float | bool | str]:
    """`{"score": 1.0 if correct else -1.0, "acc": correct, "pred": normalised answer}`."""
    answer = extract_answer(solution_str, strict_box_verify)
    if answer is None:
        return {"score": -1.0, "acc": False, "pred": INVALID}
    truth = str(ground_truth)
    if strict_box_verify:
        return {"score": 1.0 if answer == truth else -1.0, "acc": answer == truth, "pred": answer}
    correct = is_equiv(answer, truth)
    if not correct:
        try:
            correct = bool(symbolic_equal(answer, truth, timeout_s))
        except SymbolicTimeout:
            correct = False
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": normalize_answer(answer)}
