"""A data config's raw files read into validated records (with the counts the run reports); the held-out split.

``data.files.test`` is one file, or test sets: a mapping of set name to a file or a list of files (MMRole's
In-Test and Out-Test, three scenario files each). Every record of a set carries its name in
``meta["test_set"]``; ids must be unique over all the files; ``max_test_samples`` applies to each set.

``data.files.augment`` (optional) names extra training records in the training file's format (the R-EMID
paper's data-augmentation recipe): read with the training split's reader, counted apart, checked against the
test split like the training file, and added to the training records after the held-out split is drawn (the
held-out loss stays measured on the training file's records alone)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers, supervision
from rpbench.data.errors import ReadResult
from rpbench.data.files import HUB_PREFIX, resolve_data_file
from rpbench.data.records import SFTExample
from rpbench.data.settings import DataSettings

MAX_SAMPLES = {
    "train": "max_train_samples",
    "pairs": "max_train_samples",
    "labelled": "max_train_samples",
    "test": "max_test_samples",
}
TEST_SET = "test_set"
log = logging.getLogger(__name__)


def read_split(data: DataSettings, split: str, file: str | None = None) -> ReadResult:
    """Read ``data.files.<file>`` (default: ``<split>``) with the reader of ``split`` and the data config's
    format, error policy and options; an ``hf://`` name (a hub dataset) goes to the reader as it is."""
    file = file or split
    entry = data.files.get(file)
    if isinstance(entry, Mapping):
        if file != "test":
            raise ConfigError(f"data.files.{file}: one file (test sets, a mapping of names to files, are for test)")
        return _read_test_sets(data, entry)
    result = _read_file(data, split, str(entry or ""), file)
    if dropped := result.counts.get(readers.DUPLICATES_DROPPED):
        log.info("data.files.%s: %d identical records without an id dropped, the first of each kept", file, dropped)
    return _limited(data, file, result)


def check_augment_ids(train: Sequence, augment: Sequence, augment_file: str) -> None:
    """An augmentation record (``data.files.augment``) may not reuse a training record's id (ids place
    records in the held-out split and name them in reports), as a repeated id within one file may not."""
    ids = {example.id for example in train}
    repeated = [example.id for example in augment if example.id in ids]
    if repeated:
        raise DataFormatError(
            augment_file, repeated[0], "id", f"an id not in the training file ({len(repeated)} ids are in both)"
        )


def _read_file(data: DataSettings, split: str, name: str, file: str | None = None) -> ReadResult:
    """One file ``name`` of ``data.files.<file>`` (default ``<split>``), read with ``split``'s reader; a
    training file's conversations supervised as ``data.supervise`` and ``data.speaker`` say (``supervision``)."""
    configured = f"data.files.{file or split}"
    if name.startswith(HUB_PREFIX):
        path: str | Path = name
    else:
        path = resolve_data_file(name, configured, data.hf_dataset, data.name)
    policy = data.policy(split)
    result = readers.read(data.format, split, path, data.options, policy)
    if split != "train" or not all(isinstance(example, SFTExample) for example in result.examples):
        return result  # scenarios to play (format conversation): no turns to supervise
    supervision.check_found(policy.turn_field, configured)
    result.examples, counts = supervision.apply_supervision(result.examples, data.supervise, data.speaker, configured)
    result.counts.update(counts)
    return result


def _limited(data: DataSettings, file: str, result: ReadResult) -> ReadResult:
    limit = getattr(data, MAX_SAMPLES[file]) if file in MAX_SAMPLES else None
    if limit is not None:
        result.examples = result.examples[:limit]
    return result


def _read_test_sets(data: DataSettings, sets: Mapping[str, Any]) -> ReadResult:
    """Every file of every test set, its records tagged with the set; counts summed, plus the records per
    set (``test_set.<name>``). Skipped-record messages name the files as configured."""
    combined: ReadResult = ReadResult(str(dict(sets)))
    seen: dict[str, str] = {}
    for set_name, files in sets.items():
        names = [files] if isinstance(files, str) else list(files or [])
        if not names:
            raise ConfigError(f"data.files.test.{set_name}: expected a file or a list of files, got {files!r}")
        part: ReadResult = ReadResult(str(set_name))
        for name in map(str, names):
            result = _read_file(data, "test", name)
            for example in result.examples:
                if example.id in seen:
                    raise DataFormatError(
                        name, example.id, "id", f"an id unique over all test files; {seen[example.id]} has it too"
                    )
                seen[example.id] = name
            part.examples += [replace(e, meta={**e.meta, TEST_SET: str(set_name)}) for e in result.examples]
            combined.skipped += [message.replace(result.path, name) for message in result.skipped]
            for key, count in result.counts.items():
                combined.counts[key] = combined.counts.get(key, 0) + count
        combined.examples += _limited(data, "test", part).examples
        combined.counts[f"{TEST_SET}.{set_name}"] = len(part.examples)
    return combined


def _bucket(example_id: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def train_val_split(examples: Sequence, val_fraction: float, seed: int) -> tuple[list, list]:
    """Deterministic held-out split by record id (stable when records are added or reordered); the samples
    of one dialogue (``meta["dialogue"]``, e.g. MMRole's per-turn samples) stay on one side."""
    train, val = [], []
    for example in examples:
        group = example.meta.get("dialogue") or example.id
        (val if _bucket(group, seed) < val_fraction else train).append(example)
    if val_fraction > 0 and not val and len(train) > 1:
        val.append(train.pop())
    return train, val
