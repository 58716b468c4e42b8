"""The board: run cells grouped into rows, combined (seeds) or kept apart (conflicts), flagged against their
column, ranked, and adjacent rows compared."""

from __future__ import annotations

import os
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.eval.stats import paired_bootstrap
from rpbench.leaderboard.runs import (
    BOOTSTRAP,
    Cell,
    RunFolderError,
    find_runs,
    read_cell,
)
from rpbench.scoring.human_agreement import average_ranks


def combine(cells: Sequence[Cell]) -> Cell:
    """One (row, benchmark) cell from its runs: the median run when they share an identity, else a conflict."""
    identities = {c.identity.comparable() for c in cells}
    spent = {k: sum(c.judge_cost.get(k, 0) for c in cells) for k in ("requests", "tokens", "cost_usd")}
    if len(identities) > 1:
        first = cells[0]
        differ = [name for i, name in enumerate(("headline", "judge", "data")) if len({x[i] for x in identities}) > 1]
        return Cell(
            first.row,
            first.benchmark,
            "; ".join(c.run for c in cells),
            first.identity,
            None,
            None,
            None,
            first.higher_is_better,
            seeds=len(cells),
            conflict=f"{len(cells)} runs differ in {', '.join(differ)}: not combined",
            judge_cost=spent,
        )
    ordered = sorted(cells, key=lambda c: c.value)
    median = ordered[(len(ordered) - 1) // 2]
    median.seeds, median.judge_cost = len(cells), spent
    return median


def column_identity(cells: Sequence[Cell]) -> tuple[str, str, str]:
    """The column's most common (headline, judge, data); ties: the first in sorted order."""
    counts = Counter(c.identity.comparable() for c in cells if c.conflict is None)
    return min(counts, key=lambda k: (-counts[k], k))


def ranks(values: Mapping[str, float], higher_is_better: bool) -> dict[str, float]:
    """1 = best; tied values share the mean of their ranks."""
    names = list(values)
    order = average_ranks([-values[k] if higher_is_better else values[k] for k in names])
    return dict(zip(names, order))


@dataclass
class Leaderboard:
    benchmarks: list[str]
    rows: list[str]  # best mean rank first
    cells: dict[tuple[str, str], Cell]
    rank: dict[tuple[str, str], float]
    overall: dict[str, dict[str, Any]]  # row -> mean_rank, min, max, std, benchmarks
    adjacent: list[dict[str, Any]]
    skipped: list[tuple[str, str]]  # (run, why)


def build(folders: Iterable[Path]) -> Leaderboard:
    runs = find_runs(folders)
    found: dict[tuple[str, str], list[Cell]] = {}
    skipped = []
    for run in runs:
        try:
            cell, why = read_cell(run)
        except RunFolderError as error:
            cell, why = None, str(error)
        if cell is None:
            skipped.append((os.path.relpath(run), why))
        else:
            found.setdefault((cell.row, cell.benchmark), []).append(cell)
    cells = {key: combine(members) for key, members in found.items()}
    benchmarks = sorted({b for _, b in cells})
    rank: dict[tuple[str, str], float] = {}
    for benchmark in benchmarks:
        column = [c for (_, b), c in cells.items() if b == benchmark]
        if not any(c.conflict is None for c in column):
            continue
        reference = column_identity(column)
        for c in column:
            if c.conflict is None and c.identity.comparable() != reference:
                differ = [
                    n for n, a, b in zip(("headline", "judge", "data"), c.identity.comparable(), reference) if a != b
                ]
                c.flag = f"{', '.join(differ)} differ from the column's: not ranked"
        versions = Counter(c.identity.version for c in column)
        for c in column:
            c.other_version = versions[c.identity.version] < max(versions.values())
        ranked = {c.row: c.value for c in column if c.conflict is None and c.flag is None}
        higher = next(c.higher_is_better for c in column)
        rank.update({(row, benchmark): r for row, r in ranks(ranked, higher).items()})
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
    rows = sorted(overall, key=lambda r: (overall[r]["mean_rank"] is None, overall[r]["mean_rank"] or 0, r))
    return Leaderboard(benchmarks, rows, cells, rank, overall, adjacent_tests(rows, benchmarks, cells, rank), skipped)


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
