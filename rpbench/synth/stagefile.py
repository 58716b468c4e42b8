"""A stage's JSONL file: appended in batches, read back on resume, never holding an id twice.

A kill can leave a last line cut short: it is dropped on open (the work it stood for is redone, from the
generator cache). Every record carries an ``id``; ``done`` lists the ids already written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rpbench.core.errors import RpbenchError


class StageFile:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[dict[str, Any]] = []
        if self.path.exists():
            self._records = _read_repaired(self.path)
        self.done = {r["id"] for r in self._records}

    def records(self) -> list[dict[str, Any]]:
        return list(self._records)

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Write ``records`` (new ids only: a second write of an id is an error), flushed to disk."""
        fresh = list(records)
        for record in fresh:
            if record["id"] in self.done:
                raise RpbenchError(f"{self.path}: id {record['id']!r} is already written")
            self.done.add(record["id"])
        if not fresh:
            return
        with self.path.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in fresh)
            out.flush()
            os.fsync(out.fileno())
        self._records += fresh


def _read_repaired(path: Path) -> list[dict[str, Any]]:
    """The records of ``path``; a last line without its newline (a killed write) is cut off the file."""
    raw = path.read_bytes()
    complete = raw[: raw.rfind(b"\n") + 1]
    if len(complete) != len(raw):
        with path.open("r+b") as out:
            out.truncate(len(complete))
    records = []
    for number, line in enumerate(complete.decode("utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise RpbenchError(f"{path}, line {number}: not JSON ({error.msg}); remove the line to resume") from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise RpbenchError(f"{path}, line {number}: a stage record needs a string 'id'")
        records.append(record)
    return records
