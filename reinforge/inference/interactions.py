"""Interactions: a simulated user that answers the model's turns (verl's `BaseInteraction`).

An interaction is a class built as `cls(config)` from the interaction config YAML
(`interaction: [{name, class_name, config}]`). A row picks one by
`extra_info.interaction_kwargs.name` (the other keys of `interaction_kwargs` go to
`start_interaction`). After each model turn without tool calls, the agent loop calls, as
coroutines:

- `start_interaction(instance_id=None, **interaction_kwargs)` -> instance id (once per row);
- `generate_response(instance_id, messages)` -> `(should_terminate, text, turn_score, extra)`:
  `text` becomes the next user message unless the conversation ends;
- `calculate_score(instance_id)` -> float, and `finalize_interaction(instance_id)` at the end.

Turn scores reach the reward function as `extra_info["rollout_reward_scores"]["turn_scores"]`.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from reinforge.errors import ConfigError
from reinforge.reward.scorers.gsm8k import compute_score as gsm8k_score

KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


class BaseInteraction:
    def __init__(self, config: dict | None = None):
        self.config = dict(config or {})
        self.name = self.config.get("name", type(self).__name__)

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        return instance_id or uuid.uuid4().hex

    async def generate_response(self, instance_id: str, messages: list[dict], **kwargs: Any) -> tuple[bool, str, float, dict]:
        raise NotImplementedError(f"interaction {self.name!r} does not implement generate_response")

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        return None


class Gsm8kInteraction(BaseInteraction):
    """Checks the model's last answer (GSM8K `#### <number>` format, flexible) against `ground_truth`
    (from interaction_kwargs): right ends the conversation with score 1, wrong asks to try again (score 0)."""

    def __init__(self, config=None):
        super().__init__(config)
        self._truth: dict[str, Any] = {}

    async def start_interaction(self, instance_id=None, ground_truth=None, **kwargs):
        instance_id = await super().start_interaction(instance_id)
        self._truth[instance_id] = ground_truth
        return instance_id

    async def generate_response(self, instance_id, messages, **kwargs):
        last = next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), "")
        score = gsm8k_score(last, str(self._truth[instance_id]), method="flexible")
        if score == 1.0:
            return True, "Your answer is correct!", 1.0, {}
        return False, self.config.get("retry_message", "Your answer is wrong. Please try again."), 0.0, {}

    async def finalize_interaction(self, instance_id, **kwargs):
        self._truth.pop(instance_id, None)


BUILTIN_INTERACTIONS = {"gsm8k": Gsm8kInteraction}


def load_interactions(path: str | Path) -> dict[str, BaseInteraction]:
    """The interactions of an interaction config file, by name."""
    from reinforge.inference.tools.loading import config_entries

    interactions: dict[str, BaseInteraction] = {}
    for where, entry, cls in config_entries(path, KEY, "interaction", "name, class_name, config", BUILTIN_INTERACTIONS):
        config = dict(entry.get("config") or {})
        name = entry.get("name") or config.get("name") or cls.__name__
        config.setdefault("name", name)
        if name in interactions:
            raise ConfigError(f"{where}: a second interaction named {name!r}")
        interactions[name] = cls(config)
    return interactions
