"""The board: run cells grouped into rows (``--by``), combined (seeds) or kept apart (conflicts), flagged
against their column, ranked, and adjacent rows compared."""

from __future__ import annotations

import os
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rpbench.eval.stats import paired_bootstrap
from rpbench.leaderboard.runs import (
    BOOTSTRAP,
    IDENTITY_FIELDS,
    Cell,
    Identity,
    RunFolderError,
    find_runs,
    read_cell,
    short_sha,
)
from rpbench.scoring.human_agreement import average_ranks

ROWS = {  # --by: what a row is
    "model+objective": "the evaluated model, and the objective that trained it",
    "data": "model+objective, then the data's name and the test records' sha256",
    "seed": "model+objective, then the run's seed",
    "run": "the run folder: one row per run",
}


@dataclass(frozen=True)
class Rows:
    """What a row is (``--by``, one of ``ROWS``) and whether short runs get rows of their own (``--with-short``)."""

    by: str = "model+objective"
    with_short: bool = False


@dataclass(frozen=True)
class Conflict:
    """Runs of one cell that differ in identity: never combined."""

    runs: int
    differ: dict[str, dict[str, list[str]]]  # identity field -> its value -> the runs with it
    split: str  # the --by that gives each run a row of its own

    def summary(self) -> str:
        return f"{self.runs} runs differ in {', '.join(self.differ)}"

    def __str__(self) -> str:
        def shown(name: str, value: str) -> str:
            return f"test sha256 {short_sha(value, 16)}" if name == "data" else f"{name} {value}"

        details = "; ".join(
            f"{shown(name, value)} in {', '.join(runs)}"
            for name, values in self.differ.items()
            for value, runs in values.items()
        )
        return f"{self.summary()}: {details}; not combined: --by {self.split} gives each its own row"


def conflict(cells: Sequence[Cell], by: str) -> Conflict | None:
    """How ``cells`` (one row's runs on one benchmark) differ in identity; None when they do not."""
    differ = {}
    for k, name in enumerate(IDENTITY_FIELDS):
        values: dict[str, list[str]] = {}
        for c in cells:
            values.setdefault(c.identity.comparable()[k], []).append(c.run)
        if len(values) > 1:
            differ[name] = values
    if not differ:
        return None
    return Conflict(len(cells), differ, "data" if list(differ) == ["data"] and by != "data" else "run")


def combine(cells: Sequence[Cell], by: str) -> Cell:
    """One (row, benchmark) cell from its runs: the median run when they share an identity, else a conflict."""
    spent = {k: sum(c.judge_cost.get(k, 0) for c in cells) for k in ("requests", "tokens", "cost_usd")}
    differ = conflict(cells, by)
    if differ is not None:
        first = cells[0]
        distinct = [" / ".join(dict.fromkeys(getattr(c.identity, f.name) for c in cells)) for f in fields(Identity)]
        return Cell(
            first.row,
            first.benchmark,
            "; ".join(c.run for c in cells),
            Identity(*distinct),
            None,
            None,
            None,
            first.higher_is_better,
            seeds=len(cells),
            judge_cost=spent,
            provenance=None,
            short=first.short,
            conflict=differ,
            flag=first.flag,
        )
    ordered = sorted(cells, key=lambda c: c.value)
    median = ordered[(len(ordered) - 1) // 2]
    median.seeds, median.judge_cost = len(cells), spent
    return median


def column_identity(cells: Sequence[Cell]) -> tuple[str, ...]:
    """The most common identity (``IDENTITY_FIELDS``) of ``cells``; ties: the first in sorted order."""
    counts = Counter(c.identity.comparable() for c in cells)
    return min(counts, key=lambda k: (-counts[k], k))


def ranks(values: Mapping[str, float], higher_is_better: bool) -> dict[str, float]:
    """1 = best; tied values share the mean of their ranks."""
    names = list(values)
    order = average_ranks([-values[k] if higher_is_better else values[k] for k in names])
    return dict(zip(names, order))


@dataclass
class Leaderboard:
    by: str  # what a row is (ROWS)
    benchmarks: list[str]
    rows: list[str]  # best mean rank first
    cells: dict[tuple[str, str], Cell]
    members: dict[tuple[str, str], list[Cell]]  # each cell's runs
    rank: dict[tuple[str, str], float]
    overall: dict[str, dict[str, Any]]  # row -> mean_rank, min, max, std, benchmarks
    adjacent: list[dict[str, Any]]
    skipped: list[tuple[str, str]]  # (run, why)
    short: list[tuple[str, str]]  # short runs left out: (run, why it is short)


def flag_unlike(column: Sequence[Cell]) -> None:
    """Flag each of ``column``'s full, combined cells whose identity differs from the most common of them."""
    full = [c for c in column if c.conflict is None and c.short is None]
    if not full:
        return
    reference = column_identity(full)
    for c in full:
        differ = [n for n, a, b in zip(IDENTITY_FIELDS, c.identity.comparable(), reference) if a != b]
        if differ:
            c.flag = f"{', '.join(differ)} differ from the column's: not ranked"


def build(folders: Iterable[Path], rows: Rows = Rows()) -> Leaderboard:
    if rows.by not in ROWS:
        raise ValueError(f"--by {rows.by}: choose one of {', '.join(ROWS)}")
    found: dict[tuple[str, str], list[Cell]] = {}
    skipped, short = [], []
    for run in find_runs(folders):
        try:
            cell, why = read_cell(run, rows.by)
        except RunFolderError as error:
            cell, why = None, str(error)
        if cell is None:
            skipped.append((os.path.relpath(run), why))
            continue
        if cell.short is not None:
            if not rows.with_short:
                short.append((cell.run, cell.short))
                continue
            cell.row += f" [short: {cell.short}]"
            cell.flag = f"short run ({cell.short}): not ranked"
        found.setdefault((cell.row, cell.benchmark), []).append(cell)
    cells = {key: combine(members, rows.by) for key, members in found.items()}
    benchmarks = sorted({b for _, b in cells})
    rank: dict[tuple[str, str], float] = {}
    for benchmark in benchmarks:
        column = [c for (_, b), c in cells.items() if b == benchmark]
        flag_unlike(column)
        versions = Counter(c.identity.version for c in column)
        for c in column:
            c.other_version = versions[c.identity.version] < max(versions.values())
        ranked = {c.row: c.value for c in column if c.conflict is None and c.flag is None}
        rank.update({(row, benchmark): r for row, r in ranks(ranked, column[0].higher_is_better).items()})
    overall = {}
    for row in sorted({r for r, _ in cells}):
        mine = [rank[row, b] for b in benchmarks if (row, b) in rank]
        overall[row] = {
            "mean_rank": statistics.fmean(mine) if mine else None,
            "min": min(mine, default=None),
            "max": max(mine, default=None),
            "std": statistics.stdev(mine) if len(mine) > 1 else None,
            "benchmarks": len(mine),
        }
    order = sorted(overall, key=lambda r: (overall[r]["mean_rank"] is None, overall[r]["mean_rank"] or 0, r))
    adjacent = adjacent_tests(order, benchmarks, cells, rank)
    return Leaderboard(rows.by, benchmarks, order, cells, found, rank, overall, adjacent, skipped, short)


def adjacent_tests(
    rows: Sequence[str], benchmarks: Sequence[str], cells: Mapping[tuple[str, str], Cell], rank: Mapping
) -> list[dict[str, Any]]:
    """Paired bootstrap of each adjacent pair (upper, lower) on every benchmark both are ranked on, over the
    scores.jsonl units both runs have; delta = lower - upper."""
    tests = []
    for upper, lower in zip(rows, rows[1:]):
        for benchmark in benchmarks:
            if (upper, benchmark) not in rank or (lower, benchmark) not in rank:
                continue
            a, b = cells[upper, benchmark].units, cells[lower, benchmark].units
            shared = sorted(set(a) & set(b))
            test = {"upper": upper, "lower": lower, "benchmark": benchmark, "shared_units": len(shared)}
            if shared:
                test.update(paired_bootstrap([a[k] for k in shared], [b[k] for k in shared], **BOOTSTRAP))
            tests.append(test)
    return tests
