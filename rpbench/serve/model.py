"""The served model: loaded from a model config, named for clients, and its token log-probabilities."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.models.config_tree import compose_model_config
from rpbench.models.settings import ModelSettings


@dataclass
class ServedModel:
    model: Any
    tokenizer: Any
    stop_ids: list[int]
    name: str
    # Unique across local folders of the same name; no machine path (see model_identity).
    identity: str


def load_served_model(model_cfg: ModelSettings | Mapping[str, Any] | str) -> ServedModel:
    """Load a model for serving: its settings, a model config mapping, or the name of a ``conf/model`` entry."""
    from rpbench.models import end_of_turn_ids, load

    if isinstance(model_cfg, str):
        cfg = compose_model_config(model_cfg)
    elif isinstance(model_cfg, ModelSettings):
        cfg = model_cfg
    else:
        cfg = ModelSettings.parse(model_cfg, "model")
    model, tokenizer = load(cfg)
    model.eval()
    return ServedModel(
        model,
        tokenizer,
        end_of_turn_ids(cfg, tokenizer),
        served_name(cfg.name_or_path),
        model_identity(cfg.name_or_path),
    )


def served_name(name: str) -> str:
    """The default model name clients use for ``model.name_or_path`` ``name``: a local folder's name, the hub
    id's last part, ``tiny:<family>``."""
    path = Path(name)
    return path.resolve().name if path.exists() else name.rstrip("/").rsplit("/", 1)[-1]


def model_identity(name: str) -> str:
    """The unique id of ``model.name_or_path`` ``name`` (judge caches key on it): the hub id or
    ``tiny:<family>``; for a local folder its name plus a hash of its full path, so no machine path reaches
    results."""
    path = Path(name)
    if not path.exists():
        return name
    return f"local/{path.resolve().name}-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]}"


def token_logprobs(
    model, rows: Sequence[Sequence[int]], top: int
) -> list[tuple[list[float | None], list[list[tuple[int, float]] | None]]]:
    """Per row of token ids, each token's log-probability under ``model`` given the tokens before it (None for
    the first) and the ``top`` most likely (id, log-probability) pairs at that position (right-padded batch)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    out = []
    for i, row in enumerate(rows):
        logp = logits[i, : len(row) - 1].float().log_softmax(-1)
        chosen = logp.gather(1, torch.tensor(row[1:], device=device)[:, None])[:, 0].tolist()
        best = logp.topk(top, dim=-1) if top else None
        alternatives = (
            [list(zip(b, v)) for b, v in zip(best.indices.tolist(), best.values.tolist())]
            if best is not None
            else [[] for _ in chosen]
        )
        out.append(([None, *chosen], [None, *alternatives]))
    return out


def context_length(model) -> int:
    """The model's maximum positions (prompt plus reply)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    value = getattr(config, "max_position_embeddings", None)
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{type(model).__name__}: its config has no max_position_embeddings to bound replies by")
    return value
