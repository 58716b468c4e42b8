"""Input validation errors and the skip-or-raise policy every reader shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypeVar

OnError = Literal["raise", "skip"]
T = TypeVar("T")


class RpbenchError(Exception):
    """An error in what the user gave (data, configuration): run.py prints its message alone and exits 1;
    the traceback goes to the run log only."""


class ConfigError(RpbenchError, ValueError):
    """A configuration that cannot work. The message names each key, its value and what is allowed."""


class DataFormatError(RpbenchError, ValueError):
    """A record that does not match its format. The message names file, record, field and expectation."""

    def __init__(self, path: str | Path, record: str | int, field: str, problem: str):
        self.path, self.record, self.field, self.problem = str(path), record, field, problem
        super().__init__(f"{path}: record {record}: field '{field}': {problem}")


@dataclass
class ReadResult(Generic[T]):
    """Records read from one file, plus the ones skipped under ``on_error=skip`` (never silent), and what
    the reader changed or added, counted (``counts``, e.g. ``system_filled``; reported with the others)."""

    path: str
    examples: list[T] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add_error(self, error: DataFormatError, on_error: OnError) -> None:
        if on_error == "raise":
            raise error
        if on_error != "skip":
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.skipped.append(str(error))

    def summary(self) -> dict[str, object]:
        return {
            "path": self.path,
            "read": len(self.examples),
            "skipped": len(self.skipped),
            "first_skipped": self.skipped[:3],
            **self.counts,
        }
