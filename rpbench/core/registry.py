"""One registration idiom for every extension point: a name -> object table filled by a decorator.

Modelled on verl's ``register_policy_loss`` / ``get_policy_loss_fn``::

    METRICS = Registry("metric")

    @METRICS.register("rouge_l")
    def rouge_l(predictions, references): ...

    METRICS.get("rouge_l")      # the function; an unknown name raises naming the valid ones
    METRICS.names()             # sorted registered names

A registry's package imports all its modules (``import_modules``), so a new file there is registered
without an edit elsewhere; a module outside rpbench is registered by importing it (``plugins`` in the config).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable
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

    def unregister(self, name: str) -> Any:
        """Remove ``name`` (a plugin or test that registered it for a while); returns what it held."""
        return self._entries.pop(name)

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


def import_modules(package: str, path: Iterable[str]) -> None:
    """Import every module of a package, so that each file dropped into it registers its entries.

    Called from the package's ``__init__``: ``import_modules(__name__, __path__)``. A module run with
    ``python -m`` is left to runpy (importing it first would run it twice).
    """
    running = getattr(sys.modules.get("__main__"), "__spec__", None)
    for module in pkgutil.iter_modules(path):
        name = f"{package}.{module.name}"
        if running is None or running.name != name:
            importlib.import_module(name)
