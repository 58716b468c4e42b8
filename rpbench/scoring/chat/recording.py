"""Recorded replies: a JSONL file of chat replies keyed by their request, written by any judge with
``judge.record_to=<file>`` and answered from by ``judge=replay`` (``rpbench.scoring.chat.replay``).

A line is ``{"key", "model", "reply", "prompt_tokens", "completion_tokens"}``; the key is the sha256 of the
request's messages and sampling (temperature, top_p, max_tokens): what changes the reply, less the endpoint and
model, which the file as a whole stands for. No prompt is stored, so a recording stays small.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rpbench.core.errors import DataFormatError
from rpbench.data.jsonl import object_lines
from rpbench.scoring.chat.cache import CachedReply, digest

if TYPE_CHECKING:
    from rpbench.scoring.chat.client import ChatResult


def replay_key(messages: Sequence[Mapping[str, Any]], sampling: Mapping[str, Any]) -> str:
    """The stable hex digest a request's reply is recorded under."""
    return digest({"messages": list(messages), "sampling": dict(sampling)})


FIELDS = {"key": str, "model": str, "reply": str, "prompt_tokens": int, "completion_tokens": int}


def read_recording(path: Path) -> dict[str, CachedReply]:
    """The replies of a recording by key (the last of a key recorded twice); errors name file, line and field."""
    replies = {}
    for number, row in object_lines(path):
        for name, kind in FIELDS.items():
            if not isinstance(row.get(name), kind):
                raise DataFormatError(path, f"line {number}", name, f"a {kind.__name__}")
        replies[row["key"]] = CachedReply(row["reply"], row["prompt_tokens"], row["completion_tokens"])
    return replies


class Recording:
    """Appends each reply to ``path`` once per key (keys already in the file are kept, not repeated)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keys = set(read_recording(self.path)) if self.path.is_file() else set()

    def add(self, messages: Sequence[Mapping[str, Any]], sampling: Mapping[str, Any], model: str, result: ChatResult):
        key = replay_key(messages, sampling)
        if key in self.keys:
            return
        self.keys.add(key)
        row = {
            "key": key,
            "model": model,
            "reply": result.text or "",
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
        }
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
