"""Variance by source of whole-conversation scores: ``python -m rpbench.conversation_variance <sweep folder>``
(``rpbench variance``) reads a sweep of ``evaluator=conversation`` runs over policy seeds, simulator seeds and
judges, and writes variance.md and variance.json into it (experiments/conversations/README.md, "Variance by
source")."""

from rpbench.conversation_variance.cli import main

__all__ = ["main"]
