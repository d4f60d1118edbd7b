"""Tools for multi-turn rollouts: the interface (verl's BaseTool), the YAML loader, function tools, the tool-call parsers,
built-ins."""

from reinforge.inference.tools.base import (
    BaseTool,
    ReturnValueError,
    ToolSchema,
    execute_result,
    number,
    plain_schema,
    response_text,
    show_value,
    truncate,
)
from reinforge.inference.tools.builtin import CalculatorTool, Gsm8kTool, PythonTool
from reinforge.inference.tools.functions import FunctionTool, function_tool
from reinforge.inference.tools.loading import BUILTIN_TOOLS, load_all_tools, load_tools
from reinforge.inference.tools.parser import FORMATS, ParsedTurn, ToolCall, parse_tool_calls, stop_token_ids

__all__ = ["BUILTIN_TOOLS", "FORMATS", "BaseTool", "CalculatorTool", "FunctionTool", "Gsm8kTool", "ParsedTurn", "PythonTool",
           "ReturnValueError", "ToolCall", "ToolSchema", "execute_result", "function_tool", "load_all_tools", "load_tools",
           "number", "parse_tool_calls", "plain_schema", "response_text", "show_value", "stop_token_ids", "truncate"]
