"""MATH scorer: compare the last `\\boxed{...}` answer of a solution with the ground truth.

The answer is found as verl's scorer finds it: the last `\\boxed <answer>` (a space, no braces) when
there is one, else the content of the last `\\boxed{...}` (braces balanced), else of the last
`\\fbox{...}`; a solution without one scores 0.0 (the MATH instruction asks for a box). The
answer and the ground truth (a bare answer or itself a `\\boxed{}` string) are compared in two
stages, and the score is 1.0 when either says equal, else 0.0 (verl's values):

1. `normalize_answer`, a Hendrycks-style string normaliser, then exact string equality. Fast and
   without sympy, like verl's default MATH scorer, but more lenient (`72.0`, `1,000`, `\\fbox{}`,
   `\\boxed {x}` and `-3/4` pass here and fail there).
2. When the strings differ: symbolic equivalence by `math-verify` (both sides parsed as LaTeX,
   compared by sympy: `\\frac{\\sqrt{2}}{2}` equals `\\frac{1}{\\sqrt{2}}`, `0.25` equals `\\frac14`,
   `x^2+2x+1` equals `(x+1)^2`, sets and intervals by content). Parsing and comparison each get
   `timeout_s` seconds; a timeout scores `timeout_score`. If math-verify is not installed or
   raises, stage 1's answer stands.

   math-verify enforces its limit with `signal.alarm`, which only a process's main thread can
   use. It holds where reward managers call scorers by default: the training process's main
   thread, or the main thread of a worker process (`prime`; `naive`/`dapo`/`batch` with
   `reward_kwargs.timeout_s`). On any other thread (`reward_model.launch_reward_fn_async`'s
   reward thread) math-verify runs with no limit of its own, and only the manager's
   `reward_kwargs.timeout_s` bounds a row: set it (or use `prime`) when scoring in that thread.

verl scores the `numina_*` data sources with its PRIME grader instead (it also reads an answer
without a box, and refuses unreduced fractions); reinforge scores them as MATH.

What the normaliser makes equal (and nothing more; it does no symbolic maths):

- spacing: spaces, newlines, `\\!`, `\\,`, `\\;`, `\\:`, `\\displaystyle`, `\\left`, `\\right`;
- decoration: `$`, `^\\circ`/`^{\\circ}`, `\\%`/`%`, a trailing `.`, a unit written
  `\\text{ cm}` (with the leading space: from there on, as in verl), and the wrappers `\\text{}`, `\\textbf{}`, `\\mathrm{}`,
  `\\mbox{}` (their content is kept);
- fractions: `\\dfrac`/`\\tfrac` -> `\\frac`, `\\frac12` -> `\\frac{1}{2}`, `3/4` -> `\\frac{3}{4}`
  for integers, and `0.5` -> `\\frac{1}{2}` (only that decimal, as in Hendrycks' normaliser);
- numbers: `.5` -> `0.5`, `1,000` and `1{,}000` -> `1000`, `2.50` -> `2.5`, `3.0` -> `3`;
- `\\sqrt2` -> `\\sqrt{2}`; a short left-hand side `x = 3` -> `3`; a choice `(A)` -> `A`.
"""

from __future__ import annotations

import logging
import re
import threading


def last_boxed_answer(text: str, braced_only: bool = False) -> str | None:
    """The boxed answer of `text`, or None, found where verl's MATH scorer finds it: with any `\\boxed <answer>` (a
    space, no braces), the last one's answer; else the content of the last `\\boxed{...}`; `\\fbox{...}` only when
    there is no `\\boxed` at all. More lenient than verl in what is taken there: the spaced form's answer ends at the
    next `$` or line end (verl's at the next `$` only) and `\\boxed {x}` gives x. `braced_only`: the last
    `\\boxed{...}` alone, as verl's DAPO scorer reads it."""
    if braced_only:
        start = text.rfind("\\boxed{")
        return None if start < 0 else _braced_content(text[start + len("\\boxed"):])
    if "\\boxed " in text:
        answer = re.split(r"[$\n]", text.split("\\boxed ")[-1].strip(), maxsplit=1)[0].strip()
        return (_braced_content(answer) or None) if answer.startswith("{") else (answer or None)
    command = "\\boxed" if "\\boxed" in text else "\\fbox"
    start = text.rfind(command)
    if start < 0:
        return None
    rest = text[start + len(command):].lstrip()
    return _braced_content(rest) if rest.startswith("{") else None


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
_UNIT = re.compile(r"\\(?:text|mbox)\{ ")  # a unit, as verl's normaliser takes it: from there to the end goes
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
    text = _UNIT.split(text, maxsplit=1)[0]
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


class SymbolicTimeout(Exception):
    """math-verify ran out of its time while parsing or comparing."""


def symbolic_equal(answer: str, ground_truth: str, timeout_s: int | None = 5) -> bool | None:
    """Whether math-verify finds the two LaTeX answers equivalent; None when it is not installed or
    cannot parse one of them. Raises SymbolicTimeout when parsing or comparing exceeds `timeout_s`;
    off the main thread there is no limit (see the module docstring)."""
    try:
        from math_verify import LatexExtractionConfig, parse, verify
        from math_verify.errors import TimeoutException
    except ImportError:
        return None
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs every unparsable answer
    timeout = timeout_s if threading.current_thread() is threading.main_thread() else None
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    try:
        # raise_on_error: a parse that runs out of time raises (else math-verify returns [], read as unparsable)
        gold = parse(f"\\boxed{{{ground_truth}}}", extraction_config=config, parsing_timeout=timeout, raise_on_error=True)
        pred = parse(f"\\boxed{{{answer}}}", extraction_config=config, parsing_timeout=timeout, raise_on_error=True)
        if not gold or not pred:
            return None
        return bool(verify(gold, pred, timeout_seconds=timeout, raise_on_error=True))
    except TimeoutException as error:
        raise SymbolicTimeout(str(error)) from None
    except Exception:  # math-verify's parser raises on some LaTeX; the string comparison stands
        return None


def compute_score(solution_str: str, ground_truth: str, timeout_s: int | None = 5, timeout_score: float = 0.0) -> float:
    """1.0 when the last boxed answer of `solution_str` equals `ground_truth` (string-normalised or,
    failing that, symbolically by math-verify), else 0.0; `timeout_score` when math-verify times
    out. A ground truth that contains a `\\boxed{}` is compared by its boxed content."""
    answer = last_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    truth = str(ground_truth)
    boxed_truth = last_boxed_answer(truth)
    truth = boxed_truth if boxed_truth is not None else truth
    if is_equiv(answer, truth):
        return 1.0
    try:
        return 1.0 if symbolic_equal(answer, truth, timeout_s) else 0.0
    except SymbolicTimeout:
        return float(timeout_score)
