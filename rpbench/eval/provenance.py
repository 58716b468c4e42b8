"""What produced an evaluation file: a fingerprint kept beside it, so a re-run resumes only its own work.

A file the evaluation appends to and resumes (``predictions.jsonl``, a conversation's turn files,
``conversations.jsonl``) has ``<stem>.fingerprint.json`` beside it: the model's identity (its name, class
and a sha256 of its weights, so ``init_from``, adapters and further training all count; an endpoint's
address and model name), the tokenizer's chat template, the generation settings that change the text and,
for the simulator's and the sessions' files, the simulator's settings. A re-run resumes the file only under
the same fingerprint. Under another (or without one) the earlier file is moved aside whole, to
``<stem>.<k><suffix>`` with its fingerprint, and the evaluation starts that file afresh: old and new
results are never mixed, and nothing is lost. The keys that differ are logged and reported.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from rpbench.core.atomic import partial_path, publish
from rpbench.core.typed import as_dict
from rpbench.models.generation import GenerationSettings
from rpbench.models.zero3 import is_partitioned

log = logging.getLogger(__name__)

# Generation settings that say how generation runs, not what it writes (batched rows generate what they do alone).
NOT_COMPARED = ("batch_size", "synced_gpus", "gather_per_batch", "merge_timeout_s", "progress", "cache")
SHOWN_DIFFERENCES = 6


def weights_sha256(model) -> str | None:
    """sha256 of every tensor of ``model``'s state dict (name, dtype, shape, bytes); None for a partitioned
    model (ZeRO-3), whose ranks hold parts only."""
    if is_partitioned(model):
        return None
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        if tensor.is_meta:
            continue
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
        flat = tensor.detach().contiguous().reshape(-1)
        digest.update(flat.view(dtype=torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def model_identity(model, tokenizer) -> dict[str, Any]:
    """The in-process model's identity: where it was loaded from, its class, its weights and chat template."""
    template = getattr(tokenizer, "chat_template", None)
    return {
        "model.name_or_path": getattr(model, "name_or_path", None),
        "model.class": type(model).__name__,
        "model.weights_sha256": weights_sha256(model),
        "tokenizer.chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
    }


def generation_settings(opts: GenerationSettings) -> dict[str, Any]:
    """The generation settings that change what is generated, as ``generation.<key>``."""
    return {f"generation.{k}": v for k, v in as_dict(opts).items() if k not in NOT_COMPARED}


def fingerprint_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.fingerprint.json")


def _plain(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """``fingerprint`` as it reads back from its file."""
    return json.loads(json.dumps(dict(fingerprint), default=str))


def _stored(path: Path) -> dict[str, Any] | None:
    """The fingerprint beside ``path``; None without one, or with one that cannot be read."""
    try:
        stored = json.loads(fingerprint_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def matches(path: Path, fingerprint: Mapping[str, Any]) -> bool:
    """Whether ``path`` was written under ``fingerprint``."""
    return _stored(path) == _plain(fingerprint)


def _aside(path: Path) -> Path:
    """The first free ``<stem>.<k><suffix>`` beside ``path``."""
    k = 1
    while (kept := path.with_name(f"{path.stem}.{k}{path.suffix}")).exists():
        k += 1
    return kept


def claim(path: Path, fingerprint: Mapping[str, Any]) -> dict[str, Any] | None:
    """Make ``path`` this run's to append to: kept when written under ``fingerprint``; else moved aside
    (with its fingerprint), the differing keys logged. Then ``fingerprint`` is stored beside it. Returns
    what was moved aside (``file``, ``differs``: the keys), None when nothing was."""
    current = _plain(fingerprint)
    stored = _stored(path)
    moved = None
    if path.exists() and stored != current:
        kept = _aside(path)
        path.rename(kept)  # the data first: a reader that still finds the old fingerprint finds no data
        if fingerprint_path(path).exists():
            fingerprint_path(path).rename(fingerprint_path(kept))
        if stored is None:
            differs = ["(no readable fingerprint)"]
            shown = f"it has no readable record of what wrote it ({fingerprint_path(path).name})"
        else:
            differs = sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))
            changes = [f"{k}: {stored.get(k)!r} -> {current.get(k)!r}" for k in differs[:SHOWN_DIFFERENCES]]
            more = f"; ... and {len(differs) - SHOWN_DIFFERENCES} more" if len(differs) > SHOWN_DIFFERENCES else ""
            shown = "it was written by another model or settings (" + "; ".join(changes) + more + ")"
        log.warning("%s: not resumed, %s; moved to %s, starting afresh", path.name, shown, kept.name)
        moved = {"file": kept.name, "differs": differs}
    if stored != current or moved is not None:
        partial = partial_path(fingerprint_path(path))
        partial.write_text(json.dumps(current, indent=1, sort_keys=True), encoding="utf-8")
        publish(partial, fingerprint_path(path))
    return moved
