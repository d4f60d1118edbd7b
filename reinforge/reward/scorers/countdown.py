"""Countdown scorer: does the equation in `<answer>...</answer>` reach the target with the given numbers?

ground_truth is `{"target": int, "numbers": [int, ...]}`. The equation is the content of the last
`<answer>...</answer>` of the solution; when the text contains the prompt, everything up to
"Assistant:" or "<|im_start|>assistant" is dropped first. Scores, as in verl:

- `score` (1.0): the equation uses every given number exactly once and evaluates to the target
  (absolute tolerance 1e-5);
- `format_score` (0.1): an equation is present but uses other numbers, contains characters
  other than digits, `+ - * / ( ) .` and whitespace, cannot be evaluated, or misses the target;
- 0.0: no `<answer>` with a non-empty equation (an empty `<answer></answer>` counts as absent).

Unlike verl, the equation is evaluated by a small arithmetic interpreter over the parsed
syntax tree, never by `eval`, so `**` or huge intermediate powers cannot be used.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

_PROMPT_END_MARKERS = ("Assistant:", "<|im_start|>assistant")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ALLOWED_CHARS = re.compile(r"^[\d+\-*/().\s]+$")
_BINARY_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_UNARY_OPS: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def extract_solution(solution_str: str) -> str | None:
    """The stripped content of the last `<answer>...</answer>`, or None when absent or empty."""
    for marker in _PROMPT_END_MARKERS:
        if marker in solution_str:
            solution_str = solution_str.split(marker, 1)[1]
            break
    matches = _ANSWER.findall(solution_str)
    if not matches:
        return None
    return matches[-1].strip() or None


def uses_numbers_exactly(equation: str, numbers: list[int]) -> bool:
    """Whether the integers written in `equation` are exactly `numbers` (as a multiset)."""
    written = [n.lstrip("0") or "0" for n in re.findall(r"\d+", equation)]  # as text: int() refuses 4300+ digits
    return sorted(written) == sorted(str(int(n)) for n in numbers)


def evaluate_equation(equation: str) -> float | None:
    """The value of an arithmetic expression of + - * / and parentheses, or None when invalid."""
    if not _ALLOWED_CHARS.match(equation):
        return None
    try:
        tree = ast.parse(equation, mode="eval")
        return float(_evaluate(tree.body))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):  # deep nesting too
        return None


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        return _BINARY_OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"not allowed in an equation: {ast.dump(node)}")


def compute_score(
    solution_str: str, ground_truth: Mapping[str, Any], format_score: float = 0.1, score: float = 1.0
) -> float:
    """`score` for a correct equation, `format_score` for a present but wrong one, 0 when absent."""
    equation = extract_solution(solution_str)
    if equation is None:
        return 0.0
    if not uses_numbers_exactly(equation, list(ground_truth["numbers"])):
        return format_score
    result = evaluate_equation(equation)
    if result is None or abs(result - float(ground_truth["target"])) >= 1e-5:
        return format_score
    return score
