"""A data config's raw files read into validated records (with the counts the run reports); the held-out split."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.data import readers
from rpbench.data.errors import ReadResult
from rpbench.data.files import HUB_PREFIX, image_root, resolve_data_file

# Data-config keys passed to the readers as format options.
READER_OPTIONS = ("task_dimensions", "image_root", "test_splits", "columns", "tags", "heldout", "images")
MAX_SAMPLES = {"train": "max_train_samples", "pairs": "max_train_samples", "test": "max_test_samples"}


def read_split(data_cfg: Mapping[str, Any], split: str) -> ReadResult:
    """Read ``data.files.<split>`` with the data config's format, error policy and options; an ``hf://``
    name (a hub dataset) goes to the reader as it is."""
    name = str((data_cfg.get("files") or {}).get(split) or "")
    path = name if name.startswith(HUB_PREFIX) else resolve_data_file(data_cfg, split)
    options = {key: as_plain(data_cfg[key]) for key in READER_OPTIONS if data_cfg.get(key) is not None}
    if "image_root" in options:
        options["image_root"] = image_root(data_cfg)
    result = readers.read(
        str(data_cfg["format"]), split, path, on_error=str(data_cfg.get("on_error", "raise")), **options
    )
    limit = data_cfg.get(MAX_SAMPLES[split])
    if limit is not None:
        result.examples = result.examples[: int(limit)]
    return result


def as_plain(value: Any) -> Any:
    """A config node as plain Python (a reader option); anything else unchanged."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _bucket(example_id: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def train_val_split(examples: Sequence, val_fraction: float, seed: int) -> tuple[list, list]:
    """Deterministic held-out split by record id (stable when records are added or reordered)."""
    train, val = [], []
    for example in examples:
        (val if _bucket(example.id, seed) < val_fraction else train).append(example)
    if val_fraction > 0 and not val and len(train) > 1:
        val.append(train.pop())
    return train, val
