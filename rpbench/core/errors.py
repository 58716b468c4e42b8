"""The errors rpbench raises for what the user gave: run.py prints their message alone and exits 1."""

from __future__ import annotations

from pathlib import Path


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
