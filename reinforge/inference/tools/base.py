"""The tool interface agent loops call (verl's `BaseTool`), and how a tool's answer is shaped.

A tool is a class built as `cls(config, tool_schema)` from the tool config YAML. Per row that
uses it, the loop calls, all as coroutines:

- `create(instance_id=None, create_kwargs={...})` -> instance id (a `(id, anything)` tuple is
  accepted too, as newer verl tools return);
- `execute(instance_id, parameters, **execute_kwargs)` -> `(response, step_reward, metrics)`,
  once per call the model makes; `response` is text (or an object with `.text`, or a dict with
  "text");
- `calc_reward(instance_id)` -> float, the tool's reward for the whole conversation;
- `release(instance_id)`, when the conversation ends.

`create_kwargs`/`execute_kwargs` come from the row's `extra_info.tools_kwargs[<tool name>]`.
"""

from __future__ import annotations

import uuid
from typing import Any


class BaseTool:
    """A tool the model can call; subclasses override `execute` (and the others as needed)."""

    def __init__(self, config: dict | None = None, tool_schema: dict | None = None):
        self.config = dict(config or {})
        self.tool_schema = tool_schema or {}
        self.name = self.tool_schema.get("function", {}).get("name") or type(self).__name__

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


def response_text(response: Any) -> str:
    """The text of a tool's response, whichever of the accepted shapes it has."""
    if response is None:
        return ""
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        return str(response.get("text") or "")
    return str(getattr(response, "text", None) or "")


def truncate(text: str, limit: int, side: str) -> str:
    """`text` cut to `limit` characters, keeping the left, right or both ends (`middle`), marked as cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + text[-limit:]
    head = limit // 2
    return text[:head] + "...(truncated)..." + text[len(text) - (limit - head):]
