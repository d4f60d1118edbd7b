"""Interactions: a simulated user that answers the model's turns (verl's `BaseInteraction`).

An interaction is a class built as `cls(config)` from the interaction config YAML
(`interaction: [{name, class_name, config}]`; without a name: the class name without
`Interaction`, lowercased, as verl). A row picks one by `extra_info.interaction_kwargs.name`.
The agent loop calls it as verl's does, as coroutines, with a request id of its own per row:

- `start_interaction(request_id, **interaction_kwargs)` once per row (the name included; what it
  returns is not used);
- `generate_response(request_id, messages, **interaction_kwargs)` after each model turn without
  tool calls -> `(should_terminate, text, turn_score, extra)`: `text` becomes the next user
  message unless the conversation ends; a `turn_score` of None is no score for that turn;
- `calculate_score` -> float and `finalize_interaction` at the end, given the request id when they
  take one (verl's BaseInteraction declares them without).

A method that raises or returns another shape is the row's interaction error (counted in the
`interaction_errors` metric; the conversation ends there and a failed `calculate_score` scores 0),
never the batch's. Turn scores reach the reward function as `extra_info["turn_scores"]` (verl's
key) and in `extra_info["rollout_reward_scores"]`.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from reinforge.errors import ConfigError
from reinforge.inference.tools.base import ReturnValueError, check_settings, number, show_value
from reinforge.reward.scorers.gsm8k import score_answer

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


RETRY = "Your response is incorrect! You need to reflect on your answer and try again."  # verl's Gsm8kInteraction's


class Gsm8kInteraction(BaseInteraction):
    """Scores the model's last turn against `ground_truth` (from interaction_kwargs) as verl's Gsm8kInteraction: the
    GSM8K scorer, "#### " put in front when missing, flexible extraction (`score_answer`). Right ends the conversation
    with turn score 1, wrong asks to try again (turn score 0; config `retry_message`); `calculate_score` is the score
    of the last turn answered."""

    def __init__(self, config=None):
        super().__init__(config)
        check_settings(self.config, ("retry_message",), "gsm8k interaction's")
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id=None, ground_truth=None, **kwargs):
        instance_id = await super().start_interaction(instance_id)
        self._instances[instance_id] = {"ground_truth": ground_truth, "response": ""}
        return instance_id

    async def generate_response(self, instance_id, messages, **kwargs):
        last = next((m.get("content") for m in reversed(messages) if m.get("role") == "assistant"), None)
        self._instances[instance_id]["response"] = last or ""
        score = await self.calculate_score(instance_id)
        if score == 1.0:
            return True, "Your response is correct!", 1.0, {}  # verl's words, which the model reads
        return False, self.config.get("retry_message", RETRY), 0.0, {}

    async def calculate_score(self, instance_id, **kwargs):
        state = self._instances[instance_id]
        return score_answer(state["response"], state["ground_truth"])

    async def finalize_interaction(self, instance_id, **kwargs):
        self._instances.pop(instance_id, None)


def response_result(result: Any) -> tuple[bool, str, float | None]:
    """(should_terminate, text, turn_score) of what `generate_response` returned, checked: ReturnValueError says what is
    wrong. A turn score of None is no score for that turn (verl's agent loop skips it)."""
    if not isinstance(result, (tuple, list)) or len(result) != 4:
        raise ReturnValueError(f"returned {show_value(result)} from generate_response; it returns "
                               "(should_terminate, text, turn_score, extra)")
    done, text, score, _ = result
    if not isinstance(text, str):
        raise ReturnValueError(f"returned the text {show_value(text)} from generate_response, not a string")
    return bool(done), text, None if score is None else number(score, "the turn score from generate_response")


BUILTIN_INTERACTIONS = {"gsm8k": Gsm8kInteraction,
                        "verl.interactions.gsm8k_interaction.Gsm8kInteraction": Gsm8kInteraction}  # as verl's YAMLs name it
INTERFACE = ("start_interaction", "generate_response", "calculate_score", "finalize_interaction")


def chosen_interaction(interaction_kwargs: dict, names) -> str | None:
    """The interaction a row's extra_info.interaction_kwargs choose: its `name`, or without one the only interaction
    there is; None when that is not one of `names`."""
    name = interaction_kwargs.get("name")
    if name is None and len(names) == 1:
        name = next(iter(names))
    return name if name in names else None


def interaction_entries(path: str | Path) -> list[tuple[str, type, str, dict]]:
    """(where, class, name, config) of each interaction of an interaction config file, the classes imported and checked
    but not built: a ConfigError names the file and entry of a class that does not load or is not an interaction, and
    of a name given twice."""
    from reinforge.inference.tools.loading import config_entries

    entries: dict[str, tuple[str, type, str, dict]] = {}
    for where, entry, cls in config_entries(path, KEY, "interaction", ("name", "class_name", "config"), BUILTIN_INTERACTIONS):
        if not issubclass(cls, BaseInteraction) and not all(callable(getattr(cls, m, None)) for m in INTERFACE):
            raise ConfigError(f"{where}: {entry['class_name']} is not a subclass of "
                              f"reinforge.inference.interactions.BaseInteraction; an interaction implements {', '.join(INTERFACE)}")
        config = dict(entry.get("config") or {})
        simple = cls.__name__  # without a name, verl's: the class name without "Interaction", lowercased
        name = entry.get("name") or config.get("name") or (simple[:-len("Interaction")] if simple.endswith("Interaction") else simple).lower()
        config.setdefault("name", name)
        if name in entries:
            raise ConfigError(f"{where}: a second interaction named {name!r}")
        entries[name] = (where, cls, name, config)
    return list(entries.values())


def load_interactions(path: str | Path) -> dict[str, BaseInteraction]:
    """The interactions of an interaction config file, by name.

    A class is a BaseInteraction subclass, or has all of its methods; anything else is refused here, at start, rather
    than failing at the first row that uses it."""
    from reinforge.inference.tools.loading import build

    return {name: build(cls, where, config) for where, cls, name, config in interaction_entries(path)}
