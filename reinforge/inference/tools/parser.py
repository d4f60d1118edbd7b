"""Tool calls in the model's text, in the format `multi_turn.format` names (verl's tool parsers):

- `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- `qwen3_coder` (Qwen3-Coder, Qwen3.5): `<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>`,
  each value converted by the type the tool's schema gives that parameter, as verl converts it (integer, number,
  boolean, object as JSON, other types as a Python literal, `null` as None; a value that does not convert, or a
  parameter the schema does not name, stays text); a call cut off by the token limit after its last complete
  parameter still counts, as in verl.

`parse_tool_calls(text, format, schemas)` never raises: a call that is malformed (hermes: not valid JSON, not an
object, without a string `name` or `arguments` (verl's parser needs both), with non-object `arguments`;
qwen3_coder: a function or parameter tag without its `>`), or a hermes opening tag without its closing one,
becomes an error message in `items` (in the order written, beside the calls): the agent loop counts them in
`tool_errors` and, as verl's parsers do, runs only the valid calls.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict


@dataclass
class ParsedTurn:
    content: str  # the text with the tool calls removed
    items: list[ToolCall | str] = field(default_factory=list)  # in the order written: a call, or a malformed call's error

    @property
    def calls(self) -> list[ToolCall]:
        return [item for item in self.items if isinstance(item, ToolCall)]

    @property
    def errors(self) -> list[str]:
        return [item for item in self.items if isinstance(item, str)]


FORMATS = ("hermes", "qwen3_coder")


def parse_tool_calls(text: str, format: str = "hermes", schemas: dict[str, dict] | None = None) -> ParsedTurn:
    """The calls of a model turn; `schemas`: the tools' OpenAI schemas by name (qwen3_coder types its values by them)."""
    if format == "qwen3_coder":
        return _parse_qwen3_coder(text, schemas or {})
    turn = ParsedTurn(content=_CALL.sub("", text).strip())
    for body in _CALL.findall(text):
        call, error = _parse_one(body.strip())
        turn.items.append(call if call is not None else error)
    if turn.content.count(OPEN) > turn.content.count(CLOSE):
        turn.items.append(f"Error: a {OPEN} was not closed with {CLOSE}.")
    return turn


def _parse_one(body: str) -> tuple[ToolCall | None, str]:
    try:
        value = json.loads(body)
    except json.JSONDecodeError as err:
        return None, f"Error: the tool call is not valid JSON ({err.msg} at character {err.pos}): {body[:200]}"
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or "arguments" not in value:
        return None, 'Error: a tool call must be a JSON object {"name": <tool name>, "arguments": {...}}.'
    arguments = value["arguments"]
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None, f"Error: the arguments of tool {value['name']!r} are not valid JSON."
    if not isinstance(arguments, dict):
        return None, f"Error: the arguments of tool {value['name']!r} must be a JSON object."
    return ToolCall(value["name"], arguments), ""


_XML_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
_XML_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=(.*?)</parameter>|<parameter=(.*?)$", re.DOTALL)


def _parse_qwen3_coder(text: str, schemas: dict[str, dict]) -> ParsedTurn:
    if OPEN not in text:
        return ParsedTurn(content=text.strip())
    turn = ParsedTurn(content=text[:text.find(OPEN)].strip())
    for block in (a or b for a, b in _XML_CALL.findall(text)):
        for body in (a or b for a, b in _XML_FUNCTION.findall(block)):
            end = body.find(">")
            if end == -1:
                turn.items.append(f"Error: the tool call <function={body[:80]} has no '>' after the function name.")
                continue
            name, properties = body[:end], _properties(schemas.get(body[:end]))
            arguments = {}
            for parameter in (a or b for a, b in _XML_PARAMETER.findall(body[end + 1:])):
                cut = parameter.find(">")
                if cut == -1:
                    turn.items.append(f"Error: the parameter <parameter={parameter[:80]} of tool {name!r} has no '>' after "
                                      "its name.")
                    continue
                value = parameter[cut + 1:].removeprefix("\n").removesuffix("\n")
                arguments[parameter[:cut]] = _typed(value, properties.get(parameter[:cut]))
            turn.items.append(ToolCall(name, arguments))
    return turn


def _properties(schema: dict | None) -> dict:
    function = (schema or {}).get("function") or {}
    return ((function.get("parameters") or {}).get("properties")) or {}


def _typed(value: str, spec: dict | None):
    """A qwen3_coder parameter's text as the type its schema names, as verl's parser converts it."""
    if value.lower() == "null":
        return None
    if not isinstance(spec, dict):
        return value
    kind = str(spec.get("type", "string")).strip().lower()
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    try:
        if kind.startswith(("int", "uint", "long", "short", "unsigned")):
            return int(value)
        if kind.startswith(("num", "float")):
            number = float(value)
            return int(number) if number == int(number) else number
    except (ValueError, OverflowError):
        return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind == "object" or kind.startswith("dict"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value
