"""MATH scorer: compare the last `\\boxed{...}` answer of a solution with the ground truth.

The answer is the content of the last `\\boxed{...}` (braces balanced), `\\boxed <answer>` or
`\\fbox{...}`. Both it and the ground truth (a bare answer or itself a `\\boxed{}` string) are
normalised by `normalize_answer`, a Hendrycks-style string normaliser, and compared for exact
equality: 1.0 when equal, else 0.0.

What the normaliser makes equal (and nothing more; it does no symbolic maths):

- spacing: spaces, newlines, `\\!`, `\\,`, `\\;`, `\\:`, `\\displaystyle`, `\\left`, `\\right`;
- decoration: `$`, `^\\circ`/`^{\\circ}`, `\\%`/`%`, a trailing `.`, a trailing unit written
  `\\text{ cm}` (with the leading space), and the wrappers `\\text{}`, `\\textbf{}`, `\\mathrm{}`,
  `\\mbox{}` (their content is kept);
- fractions: `\\dfrac`/`\\tfrac` -> `\\frac`, `\\frac12` -> `\\frac{1}{2}`, `3/4` -> `\\frac{3}{4}`
  for integers, and `0.5` -> `\\frac{1}{2}` (only that decimal, as in Hendrycks' normaliser);
- numbers: `.5` -> `0.5`, `1,000` and `1{,}000` -> `1000`, `2.50` -> `2.5`, `3.0` -> `3`;
- `\\sqrt2` -> `\\sqrt{2}`; a short left-hand side `x = 3` -> `3`; a choice `(A)` -> `A`.
"""

from __future__ import annotations

import re

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed_answer(text: str) -> str | None:
    """Content of the last `\\boxed{...}`/`\\boxed ...`/`\\fbox{...}` in `text`, or None."""
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    command = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    rest = text[start + len(command) :]
    if rest.lstrip().startswith("{"):
        return _braced_content(rest.lstrip())
    if rest[:1].isspace():  # `\boxed 5$`: up to the closing `$` or the end of the line
        answer = re.split(r"[$\n]", rest.strip(), maxsplit=1)[0].strip()
        return answer or None
    return None


def _braced_content(text: str) -> str | None:
    """Content of the brace group that `text` starts with, or None when it never closes."""
    depth = 0
    for i, char in enumerate(text):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[1:i]
    return None


_SPACING = re.compile(r"\\[!,;:]|\\displaystyle|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\n")
_DEGREES = re.compile(r"\^\s*\{\\circ\}|\^\s*\\circ")
_TRAILING_UNIT = re.compile(r"\\(?:text|mbox)\{ [^{}]*\}\s*$")
_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_FRAC_TWO_CHARS = re.compile(r"\\frac(\w)(\w)")
_FRAC_FIRST_CHAR = re.compile(r"\\frac(\w)(?=\{)")
_FRAC_SECOND_CHAR = re.compile(r"\\frac\{([^{}]*)\}(\w)")
_SQRT_CHAR = re.compile(r"\\sqrt(\w)")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_DECIMAL = re.compile(r"^-?\d+\.\d*$")
_INT_RATIO = re.compile(r"^(-?)(\d+)/(\d+)$")
_CHOICE = re.compile(r"^\(([A-Z])\)$")


def normalize_answer(answer: str) -> str:
    """A canonical string for `answer`; see the module docstring for what it makes equal."""
    text = str(answer).strip()
    text = text.replace("\\\\", "\\").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _SPACING.sub("", text)
    text = _DEGREES.sub("", text)
    text = text.replace("\\$", "").replace("$", "")
    text = _TRAILING_UNIT.sub("", text)
    text = _unwrap(text)
    text = text.replace("\\%", "").replace("%", "").replace("{,}", "")
    text = text.strip().rstrip(".").strip()
    text = _drop_short_lhs(text)
    text = _SQRT_CHAR.sub(r"\\sqrt{\1}", text)
    text = text.replace(" ", "")
    text = _fix_fracs(text)
    text = _canonical_number(text)
    ratio = _INT_RATIO.match(text)
    if ratio:
        text = f"{ratio.group(1)}\\frac{{{ratio.group(2)}}}{{{ratio.group(3)}}}"
    return _CHOICE.sub(r"\1", text)


def _unwrap(text: str) -> str:
    while True:
        unwrapped = _WRAPPER.sub(r"\1", text)
        if unwrapped == text:
            return text
        text = unwrapped


def _drop_short_lhs(text: str) -> str:
    """`x = 3` -> `3`, `k=-1` -> `-1`; longer left-hand sides are part of the answer."""
    parts = text.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        return parts[1].strip()
    return text


def _fix_fracs(text: str) -> str:
    text = _FRAC_TWO_CHARS.sub(r"\\frac{\1}{\2}", text)
    text = _FRAC_FIRST_CHAR.sub(r"\\frac{\1}", text)
    return _FRAC_SECOND_CHAR.sub(r"\\frac{\1}{\2}", text)


def _canonical_number(text: str) -> str:
    if text.startswith("."):
        text = "0" + text
    elif text.startswith("-."):
        text = "-0" + text[1:]
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    if _DECIMAL.match(text):
        text = text.rstrip("0").rstrip(".")
    return "\\frac{1}{2}" if text == "0.5" else text


def is_equiv(answer: str | None, ground_truth: str | None) -> bool:
    """Whether two answers are equal after normalisation; None equals only None."""
    if answer is None or ground_truth is None:
        return answer is None and ground_truth is None
    return normalize_answer(answer) == normalize_answer(ground_truth)


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last boxed answer of `solution_str` equals `ground_truth` (after normalising
    both), else 0.0. A ground truth that contains a `\\boxed{}` is compared by its boxed content."""
    answer = last_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    truth = str(ground_truth)
    boxed_truth = last_boxed_answer(truth)
    return 1.0 if is_equiv(answer, boxed_truth if boxed_truth is not None else truth) else 0.0
