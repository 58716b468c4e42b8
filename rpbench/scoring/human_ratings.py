"""Files of human ratings and of judge verdicts (JSON Lines), read into ``human_agreement`` items.

Human ratings, one item a line: ``id``, ``rubric``, ``ratings`` (each annotator's: numbers, or ``a``/``b``/
``tie`` for a pairwise item), optional ``model`` (the evaluated model; pointwise), ``models`` ({"a", "b"};
pairwise), ``response`` (pointwise) or ``responses`` ({"a", "b"}; pairwise) for the length bias.

Pointwise ratings are on the scale ``evaluator.human_scale`` ([low, high], the judge's verdicts' scale).

Judge verdicts, one a line: ``id``, ``rubric``, optional ``model``, ``verdict`` and optional
``swapped_verdict`` (asked with the responses swapped, in the original labels).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.jsonl import object_lines
from rpbench.scoring.human_agreement import HumanItem, JudgeVerdict, Key, code


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows = []
    for number, row in object_lines(path):
        for name in ("id", "rubric"):
            if not isinstance(row.get(name), str) or not row[name]:
                raise DataFormatError(path, f"line {number}", name, "a non-empty string")
        rows.append((number, row))
    if not rows:
        raise DataFormatError(path, "(file)", "(lines)", "at least one item")
    return rows


def item_key(row: Mapping[str, Any]) -> Key:
    return str(row["id"]), str(row["rubric"]), str(row.get("model") or "")


def _pair(row: Mapping[str, Any], name: str, path: Path, number: int) -> tuple[Any, Any] | None:
    value = row.get(name)
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"a", "b"}:
        raise DataFormatError(path, f"line {number} ({row['id']})", name, 'an object {"a": ..., "b": ...}')
    return value["a"], value["b"]


def read_human_ratings(path: str | Path, scale: tuple[float, float] | None = None) -> list[HumanItem]:
    """The items of ``path``; a pointwise rating outside ``scale`` ([low, high], ``evaluator.human_scale``;
    None: not checked) is an error naming the line."""
    path = Path(path)
    items, seen = [], set()
    for number, row in _rows(path):
        where = f"{path}, line {number} (record {row['id']!r}), ratings"
        ratings = row.get("ratings")
        if not isinstance(ratings, list) or not ratings:
            raise DataFormatError(path, f"line {number} ({row['id']})", "ratings", "a non-empty list")
        pairwise = isinstance(ratings[0], str)
        key = item_key(row)
        if key in seen:
            raise DataFormatError(path, f"line {number} ({row['id']})", "id", "one line per (id, rubric, model)")
        seen.add(key)
        if pairwise:
            texts = _pair(row, "responses", path, number)
            models = _pair(row, "models", path, number) or ()
            length = None if texts is None else float(len(texts[0]) - len(texts[1]))
        else:
            length = float(len(row["response"])) if isinstance(row.get("response"), str) else None
            models = (str(row["model"]),) if row.get("model") else ()
        coded = tuple(code(r, pairwise, where) for r in ratings)
        outside = [] if pairwise or scale is None else [r for r in coded if not scale[0] <= r <= scale[1]]
        if outside:
            raise DataFormatError(
                path,
                f"line {number} ({row['id']})",
                "ratings",
                f"ratings on the scale [{scale[0]:g}, {scale[1]:g}] (evaluator.human_scale), got {outside[0]:g}",
            )
        items.append(HumanItem(key, coded, pairwise, length, tuple(map(str, models))))
    return items


def read_judge_verdicts(path: str | Path, pairwise: bool) -> dict[Key, JudgeVerdict]:
    path = Path(path)
    verdicts = {}
    for number, row in _rows(path):
        where = f"{path}, line {number} (record {row['id']!r})"
        if "verdict" not in row:
            raise DataFormatError(path, f"line {number} ({row['id']})", "verdict", "the judge's verdict")
        swapped = row.get("swapped_verdict")
        verdicts[item_key(row)] = JudgeVerdict(
            code(row["verdict"], pairwise, f"{where}, verdict"),
            None if swapped is None else code(swapped, pairwise, f"{where}, swapped_verdict"),
        )
    return verdicts


def ratings_file_problems(path: str, scale: tuple[float, float] | None, pairwise_allowed: bool) -> list[str]:
    """``evaluator.human_ratings`` read at startup: its first bad line (file, line, field), a rating outside
    ``scale`` (None: pairwise ratings only), or pairwise ratings where the verdicts are scores; each message
    starts with its key."""
    if scale is not None and not scale[0] < scale[1]:
        return [f"human_scale={list(scale)}: expected [low, high] with low < high"]
    try:
        items = read_human_ratings(path, scale)
    except (FileNotFoundError, ValueError) as error:  # DataFormatError or a rating that is no number
        return [f"human_ratings: {error}"]
    if items[0].pairwise and not pairwise_allowed:
        return [f"human_ratings={path}: pairwise ratings; a run's verdicts are scores (use evaluator=judge_agreement "
                "with a verdicts file for pairwise judges)"]  # fmt: skip
    if scale is None and not items[0].pairwise:
        return ["human_scale=None: expected [low, high], the scale of the pointwise ratings in human_ratings"]
    return []
