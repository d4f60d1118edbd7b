"""A named registry of functions: the one mechanism behind advantage estimators and policy losses."""

from __future__ import annotations

from collections.abc import Callable


class Registry(dict):
    """name -> function; `register(name)` is a decorator, `get(name)` fails listing what exists."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[Callable], Callable]:
        def decorator(fn: Callable) -> Callable:
            existing = super(Registry, self).get(name)
            if existing is not None and existing is not fn:
                raise ValueError(f"{self.kind} {name!r} is already registered ({existing.__module__}.{existing.__name__})")
            self[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> Callable:  # type: ignore[override]
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {', '.join(self.names())}")
        return self[name]

    def names(self) -> list[str]:
        return sorted(self)
