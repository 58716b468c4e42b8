"""A data config's raw files read into validated records (with the counts the run reports); the held-out split.

``data.files.augment`` (optional) names extra training records in the training file's format (the R-EMID
paper's data-augmentation recipe): read with the training split's reader, counted apart, checked against the
test split like the training file, and added to the training records after the held-out split is drawn (the
held-out loss stays measured on the training file's records alone)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.data import readers
from rpbench.data.errors import DataFormatError, ReadResult
from rpbench.data.files import HUB_PREFIX, image_root, resolve_data_file

# Data-config keys passed to the readers as format options.
READER_OPTIONS = ("task_dimensions", "image_root", "test_splits", "columns", "tags", "reasoning_in_target")
MAX_SAMPLES = {"train": "max_train_samples", "pairs": "max_train_samples", "test": "max_test_samples"}


def read_split(data_cfg: Mapping[str, Any], split: str, file: str | None = None) -> ReadResult:
    """Read ``data.files.<file>`` (default: ``<split>``) with the reader of ``split`` and the data config's
    format, error policy and options; an ``hf://`` name (a hub dataset) goes to the reader as it is."""
    file = file or split
    name = str((data_cfg.get("files") or {}).get(file) or "")
    path = name if name.startswith(HUB_PREFIX) else resolve_data_file(data_cfg, file)
    options = {key: data_cfg[key] for key in READER_OPTIONS if data_cfg.get(key) is not None}
    if "image_root" in options:
        options["image_root"] = image_root(data_cfg)
    result = readers.read(
        str(data_cfg["format"]), split, path, on_error=str(data_cfg.get("on_error", "raise")), **options
    )
    limit = data_cfg.get(MAX_SAMPLES[file]) if file in MAX_SAMPLES else None
    if limit is not None:
        result.examples = result.examples[: int(limit)]
    return result


def check_augment_ids(train: Sequence, augment: Sequence, augment_file: str) -> None:
    """An augmentation record (``data.files.augment``) may not reuse a training record's id (ids place
    records in the held-out split and name them in reports), as a repeated id within one file may not."""
    ids = {example.id for example in train}
    repeated = [example.id for example in augment if example.id in ids]
    if repeated:
        raise DataFormatError(
            augment_file, repeated[0], "id", f"an id not in the training file ({len(repeated)} ids are in both)"
        )


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
