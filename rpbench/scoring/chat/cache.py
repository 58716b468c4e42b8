"""SQLite cache of judge replies, so a re-run of the same judging makes no requests.

The key is a hash of (endpoint, judge model, prompt version, messages, sampling parameters): anything that can
change the reply; another server answering to the same model name gets its own entries. Credentials are
never part of it, nor stored.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(
    endpoint: str,
    model: str,
    prompt_version: str,
    messages: Sequence[Mapping[str, Any]],
    sampling: Mapping[str, Any],
) -> str:
    """Stable hex digest of everything that determines a judge reply (``endpoint``: who answers, see
    ``rpbench.scoring.chat.endpoints.endpoint_identity``)."""
    payload = {
        "endpoint": endpoint,
        "model": model,
        "prompt_version": prompt_version,
        "messages": list(messages),
        "sampling": dict(sampling),
    }
    return digest(payload)


def digest(payload: Mapping[str, Any]) -> str:
    """The sha256 hex digest of ``payload``'s canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int


class ReplyCache:
    """A key -> reply table in one SQLite file; every write is committed at once (safe to interrupt)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(SCHEMA)
        self._db.commit()

    def get(self, key: str) -> CachedReply | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text, prompt_tokens, completion_tokens FROM replies WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else CachedReply(*row)

    def put(self, key: str, model: str, prompt_version: str, reply: CachedReply) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, prompt_version, reply.text, reply.prompt_tokens, reply.completion_tokens, time.time()),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
