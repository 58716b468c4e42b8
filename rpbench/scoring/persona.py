"""How close a character's replies stay to its card, without a judge: each reply's cosine similarity to the card
(sentence embeddings, unit vectors), and the out-of-character phrases a reply holds (case-insensitive substrings).
The conversation evaluator's drift (``rpbench.eval.benchmarks.conversation.drift``) and env=conversation's turn
rewards (``rpbench.objectives.turn_credit.rewards``) both read them."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rpbench.core.errors import ConfigError

PACKAGED_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"


def ooc_hits(text: str, phrases: Sequence[str]) -> dict[str, int]:
    """How often each phrase occurs in ``text`` (case-insensitive), the phrases found only."""
    lowered = text.lower()
    counts = {p: lowered.count(p.lower()) for p in phrases}
    return {p: n for p, n in counts.items() if n}


@functools.cache
def load_encoder(encoder: str | None, what: str) -> tuple[Any, str]:
    """(sentence-transformers model, its name): ``encoder`` (a local folder or cached hub name; never
    downloaded) or the packaged all-MiniLM-L6-v2 when None; ``what``: the setting that names it, for the error.
    Loaded once per process."""
    import torch
    from sentence_transformers import SentenceTransformer

    from rpbench.scoring.metrics import fallback_model_path

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if encoder is None:
        return SentenceTransformer(fallback_model_path(), device=device), PACKAGED_ENCODER
    try:
        model = SentenceTransformer(encoder, device=device, local_files_only=True)
    except OSError as error:
        raise ConfigError(f"{what}={encoder!r} is not available locally ({error})") from error
    return model, Path(encoder).name if Path(encoder).exists() else encoder


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
