"""One registration idiom for every extension point: a name -> object table filled by a decorator.

Modelled on verl's ``register_policy_loss`` / ``get_policy_loss_fn``::

    METRICS = Registry("metric")

    @METRICS.register("rouge_l")
    def rouge_l(predictions, references): ...

    METRICS.get("rouge_l")      # the function; an unknown name raises naming the valid ones
    METRICS.names()             # sorted registered names
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Registry:
    """Objects registered under unique names, for one kind of extension point (``kind`` names it in errors)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator registering its target under ``name``; registering a name twice is an error."""

        def decorator(obj: Any) -> Any:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered (by {self._entries[name]!r})")
            self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> Any:
        """The object registered under ``name``; an unknown name raises a ``ValueError`` naming the valid ones."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {', '.join(self.names()) or '(none)'}")
        return self._entries[name]

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
