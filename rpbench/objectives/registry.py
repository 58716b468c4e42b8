"""Objective name (``objective.name``) -> LightningModule class, filled by ``@OBJECTIVES.register``.

The built-in objectives register when ``rpbench.objectives`` is imported (its ``__init__`` imports them).
"""

from __future__ import annotations

from rpbench.core.registry import Registry

OBJECTIVES = Registry("objective")


def objective_class(name: str):
    """The registered LightningModule class of ``objective.name``."""
    return OBJECTIVES.get(name)
