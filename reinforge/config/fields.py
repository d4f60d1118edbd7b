"""The building blocks of the config schema: documented dataclass fields and the base of every section.

Every field carries its documentation in `metadata["doc"]`; `reinforge train --dry-run` and the
error messages read it from there.
"""

from __future__ import annotations

import copy
from dataclasses import field
from typing import Any


def _f(default: Any, doc: str) -> Any:
    """A documented dataclass field; mutable defaults are copied per instance."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def _sub(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc})


class Node:
    """Base of the config dataclasses: `get(key, default)` as on verl's configs (ported code calls it)."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)
