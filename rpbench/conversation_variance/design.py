"""A conversation sweep's per-session scores as one balanced array: scenario x policy x simulator x judge.

Each job folder of the sweep (``.hydra/overrides.yaml``) is one run of ``evaluator=conversation``; its
``scores.jsonl`` holds one row per session (``id``: the scenario, ``verdicts``: the judge's 1-5 score per rubric
dimension). A job's level of a source is its overrides of that source's keys (``seed=2``; ``judge=openai
judge.model=x``), "(default)" when it sets none. A source with one level is not part of the model (named in the
report). Every other override must be the same in every job (one evaluated model per sweep).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rpbench.core.errors import DataFormatError, RpbenchError
from rpbench.sweep_summary import Job, read_jobs

SOURCES = ("policy", "simulator", "judge")
DEFAULT_LEVEL = "(default)"


class SweepError(RpbenchError, ValueError):
    """A sweep folder that cannot be analysed: the message names the folder or file and what is wrong."""


@dataclass(frozen=True)
class Design:
    """``scores``: one axis per factor (``scenario`` first, then the sources with two or more levels)."""

    scores: np.ndarray
    factors: tuple[str, ...]
    levels: dict[str, list[str]]
    fixed: dict[str, str]  # the sources with one level: that level (not in the model)
    dimension: str
    dropped: dict[str, str] = field(default_factory=dict)  # scenario -> why it was left out (--drop-incomplete)


def matches(override: str, keys: Sequence[str]) -> bool:
    """Whether ``override`` (``key=value``, ``+key=...``, ``~key``) sets one of ``keys`` (``judge.*``: any under it)."""
    key = override.lstrip("+~").split("=", 1)[0]
    return any(key == k or (k.endswith(".*") and key.startswith(k[:-1])) for k in keys)


def source_level(job: Job, keys: Sequence[str]) -> str:
    return " ".join(sorted(o for o in job.overrides if matches(o, keys))) or DEFAULT_LEVEL


def session_score(verdicts: Mapping[str, object], dimension: str, path: Path, line: int) -> float | None:
    """The session's score: one rubric dimension, or ``overall`` (the mean of all, as the run's headline); None
    when the session was not judged (a score is null)."""
    names = list(verdicts) if dimension == "overall" else [dimension]
    if dimension != "overall" and dimension not in verdicts:
        raise DataFormatError(path, line, f"verdicts.{dimension}", f"no such dimension (has: {', '.join(verdicts)})")
    values = [verdicts[n] for n in names]
    for name, value in zip(names, values):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise DataFormatError(path, line, f"verdicts.{name}", f"a number or null, got {value!r}")
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)


def read_scores(folder: Path, dimension: str) -> dict[str, float | None]:
    """scenario id -> session score of one job folder (None: not judged)."""
    metrics_path, path = folder / "metrics.json", folder / "scores.jsonl"
    evaluator = json.loads(metrics_path.read_text()).get("evaluator")
    if evaluator != "conversation":
        raise DataFormatError(metrics_path, "run", "evaluator", f"a conversation run, got {evaluator!r}")
    if not path.exists():
        raise SweepError(f"{path}: missing (a finished evaluator=conversation run writes it)")
    out: dict[str, float | None] = {}
    for line, text in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, line, "(line)", f"not JSON ({error.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise DataFormatError(path, line, "id", "a session row with a string id")
        if not isinstance(row.get("verdicts"), dict):
            raise DataFormatError(path, line, "verdicts", "an object of the judge's scores per dimension")
        if row["id"] in out:
            raise DataFormatError(path, line, "id", f"{row['id']!r} appears twice")
        out[row["id"]] = session_score(row["verdicts"], dimension, path, line)
    return out


def job_levels(jobs: Sequence[Job], keys: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Each job's (policy, simulator, judge) levels; the jobs must differ in nothing else, and no two share them."""
    sourced = [k for source in SOURCES for k in keys[source]]
    others = {job.name: sorted(o for o in job.overrides if not matches(o, sourced)) for job in jobs}
    first = jobs[0].name
    if differing := [name for name, rest in others.items() if rest != others[first]]:
        raise SweepError(
            f"jobs {first} and {differing[0]} differ in overrides that are no source ({others[first]} against "
            f"{others[differing[0]]}): analyse one evaluated model's sweep at a time, or name the key as a "
            "source (--policy/--simulator/--judge)"
        )
    levels: dict[str, tuple[str, ...]] = {}
    for job in jobs:
        cell = tuple(source_level(job, keys[source]) for source in SOURCES)
        if twin := next((name for name, seen in levels.items() if seen == cell), None):
            raise SweepError(f"jobs {twin} and {job.name} are the same cell ({', '.join(cell)}): one run per cell")
        levels[job.name] = cell
    return levels


def read_design(
    sweep: Path, keys: Mapping[str, Sequence[str]], dimension: str = "overall", drop_incomplete: bool = False
) -> Design:
    """The sweep's balanced design; an unfinished job, a missing cell or (unless ``drop_incomplete``) a scenario
    without a score in some run is an error naming it."""
    for path in sorted(sweep.glob("*/metrics.json")):
        try:
            json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise DataFormatError(path, "run", "(file)", f"not JSON ({error.msg}, line {error.lineno})") from None
    jobs = read_jobs(sweep)
    if not jobs:
        raise SweepError(f"{sweep}: no job folders (*/.hydra/overrides.yaml) in it")
    if failed := [job for job in jobs if job.error is not None]:
        listed = "; ".join(f"{sweep / j.name}: {j.error.strip().splitlines()[-1]}" for j in failed[:3])
        raise SweepError(f"{len(failed)} of {len(jobs)} jobs have no results ({listed}): finish or rerun them")
    cells = job_levels(jobs, keys)
    levels = {s: sorted({cell[i] for cell in cells.values()}) for i, s in enumerate(SOURCES)}
    by_cell = {cell: name for name, cell in cells.items()}
    for cell in itertools.product(*levels.values()):
        if cell not in by_cell:
            named = ", ".join(f"{s} {v}" for s, v in zip(SOURCES, cell))
            raise SweepError(f"{sweep}: no job for the cell {named}: the design must be fully crossed")
    scores = {name: read_scores(sweep / name, dimension) for name in cells}
    scenarios = sorted({s for job in scores.values() for s in job})
    gaps: dict[str, str] = {}
    for name, job in scores.items():
        for s in scenarios:
            if s not in job:
                gaps.setdefault(s, f"no session in {sweep / name / 'scores.jsonl'}")
            elif job[s] is None:
                gaps.setdefault(s, f"not judged in {sweep / name / 'scores.jsonl'} (a score is null)")
    if gaps and not drop_incomplete:
        listed = "; ".join(f"{s}: {why}" for s, why in list(gaps.items())[:3])
        raise SweepError(
            f"{len(gaps)} of {len(scenarios)} scenarios lack a score in some run ({listed}): the design must be "
            "balanced; --drop-incomplete leaves those scenarios out of every run (counted in the report)"
        )
    kept = [s for s in scenarios if s not in gaps]
    if len(kept) < 2:
        raise SweepError(f"{sweep}: {len(kept)} scenarios with a score in every run; the analysis needs 2 or more")
    varied = [s for s in SOURCES if len(levels[s]) > 1]
    array = np.full([len(kept), *(len(levels[s]) for s in varied)], math.nan)
    for name, cell in cells.items():
        index = tuple(levels[s].index(cell[SOURCES.index(s)]) for s in varied)
        for i, s in enumerate(kept):
            array[(i, *index)] = scores[name][s]
    return Design(
        array,
        ("scenario", *varied),
        {"scenario": kept, **{s: levels[s] for s in varied}},
        {s: levels[s][0] for s in SOURCES if len(levels[s]) == 1},
        dimension,
        gaps if drop_incomplete else {},
    )
