"""Persona drift without a judge: how close each character reply stays to the character card, and OOC phrases.

A reply's similarity is the cosine of its sentence embedding and the card's (a sentence-transformers model,
unit vectors); a session's drift is the least-squares slope of those similarities over its turn numbers
(negative: the replies move away from the card). Out-of-character phrases are counted as case-insensitive
substrings of each reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rpbench.scoring.sentence_encoder import PACKAGED_ENCODER, load_sentence_encoder, slope

__all__ = ["PACKAGED_ENCODER", "card_similarities", "load_encoder", "ooc_hits", "session_drift", "slope"]


def ooc_hits(text: str, phrases: Sequence[str]) -> dict[str, int]:
    """How often each phrase occurs in ``text`` (case-insensitive), the phrases found only."""
    lowered = text.lower()
    counts = {p: lowered.count(p.lower()) for p in phrases}
    return {p: n for p, n in counts.items() if n}


def load_encoder(encoder: str | None) -> tuple[Any, str]:
    """(sentence-transformers model, its name): ``encoder`` (a local folder or cached hub name; never
    downloaded) or the packaged all-MiniLM-L6-v2 when None. Loaded once per process."""
    return load_sentence_encoder(encoder, "evaluator.drift.encoder")


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


def session_drift(model: Any, card: str, replies: Sequence[str], batch_size: int) -> dict[str, Any]:
    """A session's per-turn similarities (turn i+1 for reply i), their mean and their slope over turns."""
    similarities = card_similarities(model, card, replies, batch_size)
    points = [(turn, s) for turn, s in enumerate(similarities, start=1) if s is not None]
    return {
        "similarity": similarities,
        "mean_similarity": float(np.mean([s for _, s in points])) if points else None,
        "drift_slope": slope([t for t, _ in points], [s for _, s in points]),
    }
