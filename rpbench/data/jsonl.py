"""JSONL files of objects, read line by line with errors that name the file and the line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError


def object_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line of ``path`` as (its 1-based number, its JSON object); a line that is not a JSON
    object is a DataFormatError naming the file and the line."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, f"line {number}", "(line)", f"a JSON object ({error.msg})") from None
        if not isinstance(row, dict):
            raise DataFormatError(path, f"line {number}", "(line)", "a JSON object")
        yield number, row
