"""Step 1: a seeded sample of one-line personas from a file of any size (reservoir sampling, one pass)."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError


def persona_of(line: str, path: Path, number: int) -> str | None:
    """The persona on a line: the text, or the ``persona`` of a JSON object line (PersonaHub); None if blank."""
    text = line.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            return text
        if not isinstance(record, dict) or not isinstance(record.get("persona"), str) or not record["persona"].strip():
            raise ConfigError(f"{path}, line {number}: a JSON line needs a non-empty string 'persona'")
        return record["persona"].strip()
    return text


def _decoded(raw_lines: Iterable[bytes], path: Path) -> Iterator[str]:
    """Each line as UTF-8 text; a line that is not is a ConfigError naming it."""
    for number, raw in enumerate(raw_lines, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"synth.personas_file: {path}, line {number}: not UTF-8 text ({error.reason} at byte {error.start} "
                "of the line); save the file as UTF-8"
            ) from None


def persona_id(text: str) -> str:
    return "p-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def sample_personas(path: str | Path, n: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``n`` distinct personas (all when the file has fewer), in file order, and the counts read."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"synth.personas_file: {path} is not a file")
    rng = random.Random(seed)
    seen: set[str] = set()
    reservoir: list[tuple[int, str]] = []
    counts = {"lines": 0, "blank": 0, "duplicates": 0, "distinct": 0}
    with path.open("rb") as lines:
        for number, line in enumerate(_decoded(lines, path), 1):
            counts["lines"] += 1
            text = persona_of(line, path, number)
            if text is None:
                counts["blank"] += 1
                continue
            if text in seen:
                counts["duplicates"] += 1
                continue
            seen.add(text)
            counts["distinct"] += 1
            if len(reservoir) < n:
                reservoir.append((number, text))
            elif (j := rng.randrange(counts["distinct"])) < n:
                reservoir[j] = (number, text)
    if not reservoir:
        raise ConfigError(f"synth.personas_file: {path} holds no persona")
    reservoir.sort()
    return [{"id": persona_id(text), "line": number, "persona": text} for number, text in reservoir], counts
