"""How close a character's replies stay to its card, without a judge: each reply's cosine similarity to the card
(sentence embeddings, unit vectors), and the out-of-character phrases a reply holds (case-insensitive substrings).
The conversation evaluator's drift (``rpbench.eval.benchmarks.conversation.drift``) and env=conversation's turn
rewards (``rpbench.objectives.turn_credit.rewards``) both read them; the encoder is
``rpbench.scoring.sentence_encoder``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def ooc_hits(text: str, phrases: Sequence[str]) -> dict[str, int]:
    """How often each phrase occurs in ``text`` (case-insensitive), the phrases found only."""
    lowered = text.lower()
    counts = {p: lowered.count(p.lower()) for p in phrases}
    return {p: n for p, n in counts.items() if n}


def card_similarities(model: Any, card: str, replies: Sequence[str], batch_size: int) -> list[float | None]:
    """Each reply's cosine similarity to ``card`` (None for an empty reply: nothing to embed)."""
    kept = [i for i, r in enumerate(replies) if r.strip()]
    if not kept:
        return [None] * len(replies)
    vectors = model.encode(
        [card, *(replies[i] for i in kept)],
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    out: list[float | None] = [None] * len(replies)
    for i, vector in zip(kept, vectors[1:]):
        out[i] = float(np.dot(vectors[0], vector))
    return out
