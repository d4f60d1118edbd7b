"""A named registry: the one mechanism behind advantage estimators, policy losses, agent loops and text environments."""

from __future__ import annotations

import inspect
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

    def call(self, name: str, **kwargs):
        """Call `name` with the keyword arguments its signature accepts (all of them if it takes **kwargs)."""
        fn = self.get(name)
        params = inspect.signature(fn).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        return fn(**kwargs)

    def takes(self, name: str, argument: str) -> bool:
        """`name`'s signature names `argument` (a catch-all **kwargs does not count)."""
        params = inspect.signature(self.get(name)).parameters.values()
        return any(p.name == argument and p.kind is not inspect.Parameter.VAR_KEYWORD for p in params)
