"""The building blocks of the config schema: documented dataclass fields and the base of every section.

Every field carries its documentation in `metadata["doc"]`; `reinforge train --dry-run` and the
error messages read it from there.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import field, fields
from typing import Any


def _f(default: Any, doc: str) -> Any:
    """A documented dataclass field; mutable defaults are copied per instance."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def _sub(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc})


class Node:
    """Base of the config dataclasses: read like verl's OmegaConf configs, which ported code (a user's Dataset
    class, sampler or reward manager) does: `config.key`, `config.get(key, default)`, `config[key]`, `key in config`."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in {f.name for f in fields(self)}


def node_at(root: Any, path: str) -> Any:
    """The config section at the dotted `path` under `root`: node_at(config, "actor_rollout_ref.actor")."""
    return functools.reduce(getattr, path.split("."), root)
