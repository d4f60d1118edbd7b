"""Built-in tools: a calculator, a Python runner (the local code sandbox) and a GSM8K answer checker.

Each has a default OpenAI function schema, used when its entry in the tool config has no
`tool_schema`; the schema's function name is the name the model calls it by.
"""

from __future__ import annotations

import ast
import asyncio
import math
import operator
from typing import Any

from reinforge.inference.tools.base import BaseTool, check_settings
from reinforge.reward.scorers.gsm8k import score_answer


def _schema(name: str, description: str, arg: str, arg_description: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {arg: {"type": "string", "description": arg_description}},
                       "required": [arg]}}}


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
# Python's integers grow without bound, so `(9**99)**99**99` would run for hours: every integer the calculator makes is
# kept under MAX_BITS (about 3000 decimal digits), its size estimated from the operands' before computing it.
MAX_BITS = 10_000
MAX_EXPRESSION_CHARS = 2_000  # longer expressions are refused before parsing (deep nesting costs the parser and evaluator)


def _result_bits(op: ast.operator, left: float | int, right: float | int) -> int:
    """An upper bound on the bits of `left op right` when both are integers (0 when the result is a float or small)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return 0  # float arithmetic is constant-time (and raises OverflowError past 1e308)
    if isinstance(op, ast.Mult):
        return left.bit_length() + right.bit_length()
    if isinstance(op, ast.Pow) and right > 0 and abs(left) > 1:  # right < 0 gives a float; 0, 1 and -1 to any power stay small
        return MAX_BITS + 1 if right > MAX_BITS else math.ceil(right * math.log2(abs(left)))
    return max(left.bit_length(), right.bit_length()) + 1


def evaluate_arithmetic(expression: str) -> float | int:
    """The value of an arithmetic expression of numbers, + - * / // % ** and parentheses (nothing else runs).

    It takes at most milliseconds: the expression is at most MAX_EXPRESSION_CHARS long, and no integer in it or made
    by it exceeds MAX_BITS (ValueError, before an oversized result is computed)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")

    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            _check_bits(node.value.bit_length() if isinstance(node.value, int) else 0)
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            _check_bits(_result_bits(node.op, left, right))
            result = _BINARY[type(node.op)](left, right)
            if isinstance(result, complex):  # a negative number to a fractional power
                raise ValueError("the result is not a real number")
            return result
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported element {type(node).__name__}")

    try:
        return value(ast.parse(expression.strip(), mode="eval").body)
    except (RecursionError, MemoryError):
        raise ValueError("expression nested too deeply") from None


def _check_bits(bits: int) -> None:
    if bits > MAX_BITS:
        raise ValueError(f"a number in it would exceed {MAX_BITS} bits (about {MAX_BITS * 3 // 10} digits)")


class CalculatorTool(BaseTool):
    """`calculator(expression)`: the value of an arithmetic expression, or what is wrong with it."""

    DEFAULT_SCHEMA = _schema("calculator", "Evaluate an arithmetic expression.", "expression", "e.g. (3 + 4) * 2")

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema or self.DEFAULT_SCHEMA)
        check_settings(self.config, (), "calculator tool")

    async def execute(self, instance_id, parameters, **kwargs):
        expression = str(parameters.get("expression", ""))
        try:
            result = evaluate_arithmetic(expression)
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as err:
            return f"Error: cannot evaluate {expression!r}: {err}", 0.0, {"error": 1}
        if isinstance(result, float) and result.is_integer():
            result = int(result)
        return str(result), 0.0, {}


class PythonTool(BaseTool):
    """`python(code)`: runs the code in the local sandbox (reinforge.reward.sandbox) and answers its output.

    config: `timeout_s` (default 5), `memory_mb` (default 512)."""

    DEFAULT_SCHEMA = _schema("python", "Run a Python program and return what it prints.", "code", "a Python program")

    SETTINGS = {"timeout_s": 5.0, "memory_mb": 512}

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema or self.DEFAULT_SCHEMA)
        check_settings(self.config, self.SETTINGS, "python tool's")
        for key, default in self.SETTINGS.items():
            value = self.config.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"config {key}={value!r}: a number > 0 (default {default})")
        settings = {**self.SETTINGS, **{key: self.config[key] for key in self.SETTINGS if key in self.config}}
        self.timeout_s, self.memory_mb = float(settings["timeout_s"]), int(settings["memory_mb"])

    async def execute(self, instance_id, parameters, **kwargs):
        from reinforge.reward.sandbox import run_code

        if "code" not in parameters:  # a call without its one argument runs nothing: the model is told so
            return f"Error: python takes the argument 'code' (the program to run); the call gave {sorted(parameters)}", 0.0, {
                "error": 1}
        code = str(parameters["code"])
        result = await asyncio.to_thread(run_code, code, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        if result.ok:
            return result.stdout, 0.0, {"status": result.status}
        stderr = "" if result.status == "sandbox_error" else result.stderr[-500:]  # the launcher's, not the program's
        return f"{result.stdout}Error ({result.status}): {result.reason}\n{stderr}", 0.0, {"status": result.status, "error": 1}


class Gsm8kTool(BaseTool):
    """`check_answer(answer)`: scores the model's final answer against the row's ground truth, as verl's Gsm8kTool.

    The ground truth comes from `extra_info.tools_kwargs.<name>.create_kwargs.ground_truth`. The answer is scored
    by the GSM8K scorer ("#### " put in front when missing, flexible extraction: `score_answer`); the tool answers
    `Current parsed answer='...' reward=...`, with step reward 0.0 when the score went up and -0.05 when not (verl's
    penalty for submitting without improving). `calc_reward` is the score of the last answer submitted."""

    DEFAULT_SCHEMA = _schema("check_answer", "Check a final numeric answer.", "answer", "the final answer, a number")

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema or self.DEFAULT_SCHEMA)
        check_settings(self.config, (), "gsm8k tool")
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id=None, **kwargs):
        instance_id = await super().create(instance_id)
        ground_truth = kwargs.get("ground_truth", kwargs.get("create_kwargs", {}).get("ground_truth"))
        self._instances[instance_id] = {"ground_truth": ground_truth, "answer": "", "reward": 0.0}
        return instance_id

    async def execute(self, instance_id, parameters, **kwargs):
        state = self._instances[instance_id]
        answer = str(parameters.get("answer", ""))
        state["answer"] = answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else -0.05
        state["reward"] = reward
        return f"Current parsed {answer=} {reward=}", step_reward, {}

    async def calc_reward(self, instance_id, **kwargs):
        state = self._instances[instance_id]
        return score_answer(state["answer"], state["ground_truth"])

    async def release(self, instance_id, **kwargs):
        self._instances.pop(instance_id, None)
