"""Hermes-style tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the model's text.

`parse_tool_calls(text)` never raises: a call that is not valid JSON, not an object, lacks a
string `name` or `arguments` (verl's parser needs both), has non-object `arguments`, or an opening
tag without its closing one becomes an error message in `items` (in the order written, beside the
calls): the agent loop counts them in `tool_errors` and, as verl's parser does, runs only the
valid calls.
"""

from __future__ import annotations

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


def parse_tool_calls(text: str) -> ParsedTurn:
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
