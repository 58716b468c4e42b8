"""Sentence embeddings without a judge: the sentence-transformers model that persona drift (``evaluator.drift``),
the simulator checks (``simulator_check.encoder``) and the turn rewards embed text with, and the least-squares
slope reported over turns."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rpbench.core.errors import ConfigError

PACKAGED_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"


@functools.cache
def load_sentence_encoder(encoder: str | None, where: str) -> tuple[Any, str]:
    """(sentence-transformers model, its name): ``encoder`` (a local folder or cached hub name; never
    downloaded) or the packaged all-MiniLM-L6-v2 when None. Loaded once per process and name; ``where``
    names the setting in errors."""
    import torch
    from sentence_transformers import SentenceTransformer

    from rpbench.scoring.metrics import fallback_model_path

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if encoder is None:
        return SentenceTransformer(fallback_model_path(), device=device), PACKAGED_ENCODER
    try:
        model = SentenceTransformer(encoder, device=device, local_files_only=True)
    except OSError as error:
        raise ConfigError(f"{where}={encoder!r} is not available locally ({error})") from error
    return model, Path(encoder).name if Path(encoder).exists() else encoder


def slope(turns: Sequence[float], values: Sequence[float]) -> float | None:
    """The least-squares slope of ``values`` over ``turns`` (None below two points)."""
    if len(turns) < 2:
        return None
    x, y = np.asarray(turns, dtype=float), np.asarray(values, dtype=float)
    dx = x - x.mean()
    return float((dx * (y - y.mean())).sum() / (dx * dx).sum())
