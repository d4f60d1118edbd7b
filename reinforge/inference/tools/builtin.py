"""Built-in tools: a calculator, a Python runner (the local code sandbox) and a GSM8K answer checker.

Each has a default OpenAI function schema, used when its entry in the tool config has no
`tool_schema`; the schema's function name is the name the model calls it by.
"""

from __future__ import annotations

import ast
import asyncio
import operator
from typing import Any

from reinforge.inference.tools.base import BaseTool
from reinforge.reward.scorers.gsm8k import _clean


def _schema(name: str, description: str, arg: str, arg_description: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {arg: {"type": "string", "description": arg_description}},
                       "required": [arg]}}}


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate_arithmetic(expression: str) -> float | int:
    """The value of an arithmetic expression of numbers, + - * / // % ** and parentheses (nothing else runs)."""
    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 100:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported element {type(node).__name__}")
    return value(ast.parse(expression.strip(), mode="eval").body)


class CalculatorTool(BaseTool):
    """`calculator(expression)`: the value of an arithmetic expression, or what is wrong with it."""

    DEFAULT_SCHEMA = _schema("calculator", "Evaluate an arithmetic expression.", "expression", "e.g. (3 + 4) * 2")

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema or self.DEFAULT_SCHEMA)

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

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema or self.DEFAULT_SCHEMA)

    async def execute(self, instance_id, parameters, **kwargs):
        from reinforge.reward.sandbox import run_code

        code = str(parameters.get("code", ""))
        result = await asyncio.to_thread(run_code, code, timeout_s=float(self.config.get("timeout_s", 5.0)),
                                         memory_mb=int(self.config.get("memory_mb", 512)))
        if result.ok:
            return result.stdout, 0.0, {"status": result.status}
        return f"{result.stdout}Error ({result.status}): {result.reason}\n{result.stderr[-500:]}", 0.0, {
            "status": result.status, "error": 1}


class Gsm8kTool(BaseTool):
    """`check_answer(answer)`: tells the model whether its final answer equals the row's ground truth.

    The ground truth comes from `extra_info.tools_kwargs.<name>.create_kwargs.ground_truth`.
    `calc_reward` is 1.0 when the last answer checked was right, else 0.0."""

    DEFAULT_SCHEMA = _schema("check_answer", "Check a final numeric answer.", "answer", "the final answer, a number")

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config, tool_schema or self.DEFAULT_SCHEMA)
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id=None, **kwargs):
        instance_id = await super().create(instance_id)
        ground_truth = kwargs.get("ground_truth", kwargs.get("create_kwargs", {}).get("ground_truth"))
        self._instances[instance_id] = {"ground_truth": ground_truth, "correct": False}
        return instance_id

    async def execute(self, instance_id, parameters, **kwargs):
        state = self._instances[instance_id]
        answer = _clean(str(parameters.get("answer", "")).strip())
        state["correct"] = state["ground_truth"] is not None and answer == _clean(str(state["ground_truth"]).strip())
        return ("Correct." if state["correct"] else "Incorrect."), 0.0, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 1.0 if self._instances[instance_id]["correct"] else 0.0

    async def release(self, instance_id, **kwargs):
        self._instances.pop(instance_id, None)
