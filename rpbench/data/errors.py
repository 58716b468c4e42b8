"""The skip-or-raise policy every reader shares (the errors themselves: rpbench.core.errors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from rpbench.core.errors import DataFormatError

OnError = Literal["raise", "skip"]
T = TypeVar("T")


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
