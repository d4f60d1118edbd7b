"""docs/coming_from.md names reinforge's keys for TRL's and OpenRLHF's settings: every full key it writes (a backticked
`section.key` or `section.key=value` under one of the config's sections) is a key of the schema, so the page cannot
drift from the config."""

import dataclasses
import re
from pathlib import Path

from reinforge.config.schema import Config

PAGE = Path(__file__).resolve().parents[1] / "docs" / "coming_from.md"
ROW_FIELDS = {"reward_model.ground_truth"}  # a data row's field, written as such: not a config key


def written_keys() -> set[str]:
    """The full reinforge keys the page writes in backticks (a quoted override's key too)."""
    sections = {field.name for field in dataclasses.fields(Config)}
    text = PAGE.read_text()
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)  # the command-line examples, then the inline code
    keys = set()
    for code in blocks + re.findall(r"`([^`\n]+)`", re.sub(r"```\w*\n.*?```", "", text, flags=re.S)):
        for token in code.replace("\\\n", " ").split():
            key = token.strip("'\"+").split("=")[0]
            if re.fullmatch(r"[a-z_]+(\.[a-z_0-9]+)+", key) and key.split(".")[0] in sections and key not in ROW_FIELDS:
                keys.add(key)
    return keys


def in_schema(key: str) -> bool:
    """Whether `key` is a field of the schema, or lies inside one of its free-form mappings."""
    node = Config()
    for part in key.split("."):
        if isinstance(node, dict):  # a free-form mapping (engine_kwargs, apply_chat_template_kwargs, ...): any key
            return True
        if not dataclasses.is_dataclass(node) or part not in {field.name for field in dataclasses.fields(node)}:
            return False
        node = getattr(node, part)
    return True


def test_every_key_the_page_writes_is_a_key_of_the_schema():
    keys = written_keys()
    assert len(keys) > 100, len(keys)  # both tables were read
    assert sorted(key for key in keys if not in_schema(key)) == []
    assert not in_schema("actor_rollout_ref.actor.eps_clip")  # the check can fail
