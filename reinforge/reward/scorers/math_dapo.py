"""DAPO-Math scorer: the answer after the last `Answer:` of a solution (else its last `\\boxed{}`), scored +1 / -1.

For DAPO's math data (`data_source` `math_dapo`, `math`, `math_dapo_reasoning`, `aime*`), whose
prompts end "... The last line of your response should be of the form Answer: $Answer". As in
verl, only the last 300 characters are read, and the result is a dict
`{"score": 1.0 | -1.0, "acc": bool, "pred": str}` (a wrong or missing answer costs -1, not 0), whose
`pred` validation takes a majority vote over.

As verl 0.9 reads a solution:

1. The last `Answer: ...` line. Its answer and the ground truth go through the Minerva normaliser
   (`minerva_normalize`: the right-hand side of the last `=`, units and filler words such as
   `dollars` or `points` dropped, `\\text{}`/`\\boxed{}` unwrapped, `\\frac12` braced, `$` and spaces
   removed, `1,000` -> `1000`); `pred` is the normalised answer, and equal strings score +1.
2. Without such a line, the last `\\boxed{}` of the last 100 characters: `pred` is the box's
   content, and it scores +1 when it is the ground truth as written.
3. Neither: -1, `pred` `"[INVALID]"`.

reinforge then also accepts an answer of 1. or 2. that verl's string comparison misses but the MATH
scorer's comparison finds equal (its normaliser, then math-verify: `0.5` and `\\frac{1}{2}`, `72.0`
and `72`), so it never scores lower than verl and sometimes higher (docs/rewards.md). With
`strict_box_verify=True`, as in verl, only 2. is read, compared exactly, with no second stage.
"""

from __future__ import annotations

import re

from reinforge.reward.scorers.math import SymbolicTimeout, is_equiv, last_boxed_answer, symbolic_equal

SOLUTION_CLIP_CHARS = 300
STRICT_BOX_CHARS = 100
INVALID = "[INVALID]"
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")

# Minerva's answer normalisation (Lewkowycz et al. 2022, appendix), as verl's DAPO scorer applies it: these
# replacements in order, then these expressions removed (units, filler words, TeX spacing), then the TeX rewrites.
_MINERVA_REPLACE = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
                    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"))
_MINERVA_REMOVE = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
                   "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
                   "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
                   "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
                   ",\\!", "{,}", '"', "\\dots")
_MINERVA_REWRITE = ((re.compile(r"(.*?)(\$)(.*?)(\$)(.*)"), "$\\3$"), (re.compile(r"(\\text\{)(.*?)(\})"), "\\2"),
                    (re.compile(r"(\\textbf\{)(.*?)(\})"), "\\2"), (re.compile(r"(\\overline\{)(.*?)(\})"), "\\2"),
                    (re.compile(r"(\\boxed\{)(.*)(\})"), "\\2"), (re.compile(r"(frac)([^{])(.)"), "frac{\\2}{\\3}"),
                    (re.compile(r"(sqrt)([^{])"), "sqrt{\\2}"))


def minerva_normalize(answer: str) -> str:
    """An answer as Minerva's normaliser writes it (verl's `normalize_final_answer`)."""
    answer = answer.split("=")[-1]
    for before, after in _MINERVA_REPLACE:
        answer = answer.replace(before, after)
    for expression in _MINERVA_REMOVE:
        answer = answer.replace(expression, "")
    for pattern, replacement in _MINERVA_REWRITE:
        answer = pattern.sub(replacement, answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def extract_answer(solution_str: str, strict_box_verify: bool = False) -> tuple[str | None, bool]:
    """(the raw answer, whether it came from an `Answer:` line): the last such line of the last 300 characters, else
    (or with strict_box_verify, only) the content of the last box of the last 100; (None, False) when neither."""
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    matches = [] if strict_box_verify else _ANSWER_LINE.findall(tail)
    if matches:
        return matches[-1], True
    return last_boxed_answer(tail[-STRICT_BOX_CHARS:], braced_only=True), False


def compute_score(
    solution_str: str, ground_truth: str, strict_box_verify: bool = False, timeout_s: int | None = 5
) -> dict[str, float | bool | str]:
    """`{"score": 1.0 if correct else -1.0, "acc": correct, "pred": the answer as verl reports it}`."""
    answer, from_line = extract_answer(solution_str, strict_box_verify)
    if answer is None:
        return {"score": -1.0, "acc": False, "pred": INVALID}
    truth = str(ground_truth)
    pred = minerva_normalize(answer) if from_line else answer
    correct = pred == (minerva_normalize(truth) if from_line else truth)
    if not correct and not strict_box_verify:
        candidate = (last_boxed_answer(answer) or answer) if from_line else answer  # "Answer: $\boxed{5}$" is common
        correct = is_equiv(candidate, truth)
        if not correct:
            try:
                correct = bool(symbolic_equal(candidate, truth, timeout_s))
            except SymbolicTimeout:
                correct = False
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}
