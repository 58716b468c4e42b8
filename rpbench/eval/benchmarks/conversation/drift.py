"""Persona drift without a judge: how close each character reply stays to the character card, and OOC phrases.

A reply's similarity is the cosine of its sentence embedding and the card's (a sentence-transformers model,
unit vectors); a session's drift is the least-squares slope of those similarities over its turn numbers
(negative: the replies move away from the card). Out-of-character phrases are counted as case-insensitive
substrings of each reply (both in rpbench.scoring.persona, which training's turn rewards read too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rpbench.scoring.persona import card_similarities, ooc_hits
from rpbench.scoring.sentence_encoder import PACKAGED_ENCODER, load_sentence_encoder, slope

__all__ = ["PACKAGED_ENCODER", "card_similarities", "load_encoder", "ooc_hits", "session_drift", "slope"]


def load_encoder(encoder: str | None) -> tuple[Any, str]:
    """The drift encoder (``evaluator.drift.encoder``; None: the packaged one), loaded once per process."""
    return load_sentence_encoder(encoder, "evaluator.drift.encoder")


def session_drift(model: Any, card: str, replies: Sequence[str], batch_size: int) -> dict[str, Any]:
    """A session's per-turn similarities (turn i+1 for reply i), their mean and their slope over turns."""
    similarities = card_similarities(model, card, replies, batch_size)
    points = [(turn, s) for turn, s in enumerate(similarities, start=1) if s is not None]
    return {
        "similarity": similarities,
        "mean_similarity": float(np.mean([s for _, s in points])) if points else None,
        "drift_slope": slope([t for t, _ in points], [s for _, s in points]),
    }
