"""Plain Python functions as tools (verl 0.9's `function_tool_path`): `@function_tool` in a file the config names.

    from reinforge.inference.tools import function_tool

    @function_tool
    def add(a: int, b: int) -> int:
        '''Add two integers.

        Args:
            a: The first number.
            b: The second number.
        '''
        return a + b

The OpenAI schema comes from the signature and the Google-style docstring (transformers'
`get_json_schema`, as verl builds it): every parameter needs a type hint and a line under `Args:`;
`@function_tool("name")` renames the tool, `@function_tool(schema={...})` gives the schema instead.
A function may be a coroutine; a plain one runs in a worker thread. It is called with the model's
arguments as keywords and answers with text, a dict (sent as JSON), an object with `.text`, or a
tuple `(answer, reward)` / `(answer, reward, metrics)`; anything else is sent as `str(value)`.
Function tools keep no state: a row's `tools_kwargs` do not reach them, and their `calc_reward` is 0.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reinforge.errors import ConfigError
from reinforge.inference.tools.base import BaseTool, ReturnValueError, ToolSchema, schema_name, show_value, verl_tool_schema
from reinforge.user_code import import_user_module

KEY = "actor_rollout_ref.rollout.multi_turn.function_tool_path"
_DEFINED: list[FunctionTool] = []  # every @function_tool in the order the decorators ran
_LOADED: dict[Path, dict[str, FunctionTool]] = {}  # a file's tools, once it has been imported


class FunctionTool(BaseTool):
    """A decorated function behind BaseTool's interface (no instance state)."""

    def __init__(self, fn: Callable[..., Any], schema: dict):
        super().__init__({}, ToolSchema(verl_tool_schema(schema)))
        self.fn = fn

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[str, float, dict]:
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**parameters)
        else:
            result = await asyncio.to_thread(self.fn, **parameters)
        return answer_of(result)


def function_tool(name: str | Callable[..., Any] | None = None, *, schema: dict | None = None):
    """Decorator: make a function a tool (`@function_tool`, `@function_tool("name")`, `@function_tool(schema={...})`);
    returns the function itself."""
    def decorate(fn: Callable[..., Any], tool_name: str | None) -> Callable[..., Any]:
        if schema is None:
            given = _schema_of(fn, tool_name or fn.__name__)
        else:  # as given; a name given beside it is the one the model calls
            given = json.loads(json.dumps(schema))
            if tool_name and isinstance(given.get("function"), dict):
                given["function"]["name"] = tool_name
        _DEFINED.append(FunctionTool(fn, given))
        return fn

    if callable(name) and schema is None:
        return decorate(name, None)
    return lambda fn: decorate(fn, name)


def _schema_of(fn: Callable[..., Any], tool_name: str) -> dict:
    from transformers.utils import get_json_schema

    variadic = [p.name for p in inspect.signature(fn).parameters.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if variadic:
        raise TypeError(f"@function_tool {tool_name}: the parameters {variadic} take any number of arguments, which a tool "
                        "schema cannot describe; name each parameter")
    try:
        schema = get_json_schema(fn)
    except Exception as err:  # transformers' DocstringParsingException / TypeHintParsingException
        raise TypeError(f"@function_tool {tool_name}: {err} (a function tool needs a type hint on every parameter and a "
                        "Google-style docstring describing each under Args:, or @function_tool(schema={...}))") from None
    schema["function"]["name"] = tool_name
    return schema


def answer_of(result: Any) -> tuple[str, float, dict]:
    """(text, reward, metrics) of what a function tool returned, shaped as verl shapes it."""
    if isinstance(result, tuple):
        if not 1 <= len(result) <= 3:
            raise ReturnValueError(f"returned the tuple {show_value(result)}; a function tool returns an answer, or "
                                   "(answer, reward) or (answer, reward, metrics)")
        try:  # coerced as verl coerces them: float(reward), dict(metrics)
            reward = 0.0 if len(result) < 2 or result[1] is None else float(result[1])
            metrics = {} if len(result) < 3 or result[2] is None else dict(result[2])
        except (TypeError, ValueError) as err:
            raise ReturnValueError(f"returned {show_value(result)}: the reward must be a number and the metrics a "
                                   f"mapping ({err})") from None
        return _text(result[0]), reward, metrics
    return _text(result), 0.0, {}


def _text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    if isinstance(answer, dict):
        return json.dumps(answer, ensure_ascii=False)
    text = getattr(answer, "text", None)  # verl's ToolResponse, or an object like it
    return text if isinstance(text, str) else str(answer)


def load_function_tools(path: str | Path) -> dict[str, FunctionTool]:
    """The `@function_tool`s a Python file defines, by the name the model calls them (imported once per file)."""
    file = Path(path).expanduser().resolve()
    if file in _LOADED:
        return _LOADED[file]
    before = len(_DEFINED)
    try:
        import_user_module(str(file), KEY, ConfigError)
    except ConfigError as err:
        missing = err.__cause__
        if isinstance(missing, ModuleNotFoundError) and (missing.name or "").split(".")[0] == "verl":
            raise ConfigError(f"{err} (verl is not a dependency of reinforge: import the decorator with `from "
                              "reinforge.inference.tools import function_tool`, and return text or (text, reward) where "
                              "verl's tools return its ToolResponse)") from None
        raise
    tools: dict[str, FunctionTool] = {}
    for tool in _DEFINED[before:]:
        name = schema_name(tool.get_openai_tool_schema())
        if not name:
            raise ConfigError(f"{KEY}: {file}: the schema given to @function_tool for {tool.fn.__name__} has no "
                              "function.name to be called by")
        if name in tools:
            raise ConfigError(f"{KEY}: {file} defines two function tools named {name!r}; rename one")
        tools[name] = tool
    if not tools:
        raise ConfigError(f"{KEY}: {file} defines no tool; mark each function with @function_tool "
                          "(`from reinforge.inference.tools import function_tool`)")
    _LOADED[file] = tools = dict(sorted(tools.items()))  # by name, the order verl gives the chat template
    return tools
