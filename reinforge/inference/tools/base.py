"""The tool interface agent loops call (verl's `BaseTool`), and how a tool's answer is shaped.

A tool is a class built as `cls(config, tool_schema)` from the tool config YAML. Per row that
uses it, the loop calls, all as coroutines:

- `create(instance_id=None, create_kwargs={...})` -> instance id (a `(id, anything)` tuple is
  accepted too, as newer verl tools return);
- `execute(instance_id, parameters, **execute_kwargs)` -> `(response, step_reward, metrics)`,
  once per call the model makes; `response` is text, None, a dict with "text" or an object with
  `.text` (verl's `ToolResponse`), whose text is a string or None; `step_reward` a number (or
  None: 0); `metrics` a dict (or None);
- `calc_reward(instance_id)` -> a number, the tool's reward for the whole conversation;
- `release(instance_id)`, when the conversation ends.

`create_kwargs`/`execute_kwargs` come from the row's `extra_info.tools_kwargs[<tool name>]`.
A value of another shape (a number as the response: verl's `ToolResponse.text` is a string too)
raises `ReturnValueError`, which the agent loop counts as the row's tool error.
"""

from __future__ import annotations

import math
import numbers
import uuid
from typing import Any


def check_settings(config: dict, settings: Any, what: str) -> None:
    """A ValueError naming the keys of a built-in's `config` that are not among its `settings` (verl's configs carry
    `type` and `name` too, which are allowed): a misspelt setting would silently keep its default."""
    import difflib

    unknown = sorted(set(config) - {*settings, "type", "name"})
    if unknown:
        named = [key + (f" (did you mean {close[0]}?)" if (close := difflib.get_close_matches(key, list(settings), n=1)) else "")
                 for key in map(str, unknown)]
        takes = f"settings are {', '.join(settings)}" if settings else "takes no settings"
        raise ValueError(f"config has {', '.join(named)}; the {what} {takes}")


class ReturnValueError(ValueError):
    """A tool, interaction or environment returned a value of the wrong shape (reinforge's finding: no traceback to show)."""


class BaseTool:
    """A tool the model can call; subclasses override `execute` (and the others as needed)."""

    def __init__(self, config: dict | None = None, tool_schema: dict | None = None):
        self.config = dict(config or {})
        self.tool_schema = tool_schema or {}
        self.name = schema_name(self.tool_schema) or type(self).__name__

    def get_openai_tool_schema(self) -> dict:
        """The OpenAI function schema given to the chat template (`tools=`)."""
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> str:
        return instance_id or uuid.uuid4().hex

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[Any, float, dict]:
        raise NotImplementedError(f"tool {self.name!r} ({type(self).__name__}) does not implement execute")

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        return None


class ToolSchema(dict):
    """A tool's OpenAI function schema as the tool config gives it: a dict that also reads as attributes
    (`schema.function.name`) and has `model_dump()`, as verl's pydantic OpenAIFunctionToolSchema, so a tool written
    against verl's BaseTool, which reads `self.tool_schema.function.name`, finds what it reads."""

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(f"the tool schema has no {name!r}") from None
        return ToolSchema(value) if isinstance(value, dict) and not isinstance(value, ToolSchema) else value

    def model_dump(self, **kwargs: Any) -> dict:
        return plain_schema(self)


# The fields of verl's pydantic tool schema (OpenAIFunctionToolSchema and the models inside it), by level: what a
# tool_schema of the tool config keeps there, as pydantic drops the others when verl validates it.
_TOOL_FIELDS = ("type", "function")
_FUNCTION_FIELDS = ("name", "description", "parameters", "strict")
_PARAMETERS_FIELDS = ("type", "properties", "required")
_PROPERTY_FIELDS = ("type", "description", "enum")


def verl_tool_schema(schema: dict) -> dict:
    """A tool config's `tool_schema` as verl's pydantic model keeps it and its agent loop dumps it (`exclude_unset`,
    `exclude_none`): the fields the model knows, others dropped (a parameter's `items`, `minimum`, `default`, ...), so
    the chat template renders, and the model reads, the same tool description as under verl."""
    def keep(value: Any, fields: tuple[str, ...]) -> Any:
        return {key: value[key] for key in fields if key in value and value[key] is not None} if isinstance(value, dict) else value

    out = keep(schema, _TOOL_FIELDS)
    function = out.get("function")
    if isinstance(function, dict):
        function = out["function"] = keep(function, _FUNCTION_FIELDS)
        parameters = function.get("parameters")
        if isinstance(parameters, dict):
            parameters = function["parameters"] = keep(parameters, _PARAMETERS_FIELDS)
            if isinstance(parameters.get("properties"), dict):
                parameters["properties"] = {name: keep(spec, _PROPERTY_FIELDS) for name, spec in parameters["properties"].items()}
    return out


def plain_schema(schema: Any) -> Any:
    """A tool schema as plain dicts and lists (what the chat template renders): a pydantic model (what a verl tool's
    get_openai_tool_schema may return) dumped without unset and None fields, as verl's agent loop does."""
    if not isinstance(schema, dict) and callable(getattr(schema, "model_dump", None)):
        return schema.model_dump(exclude_unset=True, exclude_none=True)
    if isinstance(schema, dict):
        return {key: plain_schema(value) for key, value in schema.items()}
    return [plain_schema(value) for value in schema] if isinstance(schema, list) else schema


def schema_name(schema: Any) -> str | None:
    """The function name of an OpenAI tool schema, the name the model calls the tool by (None when it has none)."""
    schema = plain_schema(schema)
    function = schema.get("function") if isinstance(schema, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else None


def response_text(response: Any) -> str:
    """The text of a tool's response, whichever of the accepted shapes it has (ReturnValueError for another)."""
    text = response.get("text") if isinstance(response, dict) else getattr(response, "text", response)
    if text is None or isinstance(text, str):
        return text or ""
    raise ReturnValueError(f"returned the response {show_value(response)}; a response is text, None, {{'text': ...}} or an object "
                          "with .text (verl's ToolResponse), whose text is a string")


def number(value: Any, what: str) -> float:
    """`value` as a float, when it is a number (a bool or a numpy number too); ReturnValueError naming `what` when not."""
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return float(value)
    raise ReturnValueError(f"returned {what} {show_value(value)}, not a {'finite ' if isinstance(value, numbers.Real) else ''}number")


def execute_result(result: Any) -> tuple[str, float | None, dict]:
    """(text, step reward, metrics) of what `execute` returned, checked: ReturnValueError says what is wrong."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise ReturnValueError(f"returned {show_value(result)} from execute; it returns (response, step_reward, metrics)")
    response, reward, metrics = result
    if metrics is not None and not isinstance(metrics, dict):
        raise ReturnValueError(f"returned the metrics {show_value(metrics)} from execute, not a dict")
    return response_text(response), None if reward is None else number(reward, "the step reward"), metrics or {}


def show_value(value: Any) -> str:
    """`value` for an error message: its repr, cut to 80 characters, and its type."""
    text = repr(value)
    return f"{text[:80]}... ({type(value).__name__})" if len(text) > 80 else f"{text} ({type(value).__name__})"


def truncate(text: str, limit: int, side: str) -> str:
    """`text` cut to `limit` characters on the `side` named, as verl cuts a tool answer (and as data.truncation cuts a
    prompt): `left` drops its beginning (keeps the last `limit`), `right` its end, `middle` keeps `limit // 2` of each
    end; marked as cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[len(text) - half:]
