"""The summary of a multirun sweep: every job folder's metrics.json, grouped by the runs' overrides less
``seed``, with median, mean, std and min/max per metric (RoleMRC reports medians over three seeds).

Writes into the sweep folder:
- ``runs.csv``: one row per job (overrides, status, error, every numeric metric);
- ``summary.csv``: one row per (group, metric): n, median, mean, std (sample, n-1), min, max;
- ``summary.md``: the same for the metrics that vary between runs, and the failed jobs with their error;
- ``leaderboard.md``/``.csv``/``.png`` when the runs evaluated benchmarks (``rpbench.leaderboard``).

A Hydra callback writes it at the end of ``sweep.py``; ``python sweep.py --collect <sweep dir>`` rebuilds it
for a finished or partly finished sweep.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

DIGITS = 4  # decimals kept in the tables
ERROR_FILE = "error.txt"  # written by run.py into a job's folder when the job raises
STATS = ("median", "mean", "std", "min", "max")


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"a/b/c": scalar}; lists are left out (per-record detail is not summary material)."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}/"))
        return flat
    if isinstance(tree, (int, float, str, bool)) or tree is None:
        return {prefix.rstrip("/"): tree}
    return {}


@dataclass
class Job:
    """One job folder of the sweep."""

    name: str
    overrides: list[str]
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def seed(self) -> str:
        return next((o.split("=", 1)[1] for o in self.overrides if is_seed(o)), "")

    def group(self, shared: set[str]) -> str:
        """Its overrides less the seed and those ``shared`` by every job: runs differing only in seed share it."""
        return " ".join(o for o in self.overrides if o not in shared and not is_seed(o)) or "(all)"


def is_seed(override: str) -> bool:
    return override.lstrip("+~").startswith("seed=")


def shared_overrides(jobs: list[Job]) -> set[str]:
    """The overrides every job has (shown once, not in each group's name)."""
    return set.intersection(*(set(job.overrides) for job in jobs)) if jobs else set()


def numeric(flat: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def read_job(folder: Path) -> Job:
    overrides = yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text()) or []
    job = Job(folder.name, [str(o) for o in overrides])
    metrics = folder / "metrics.json"
    if metrics.exists():
        job.metrics = numeric(flatten(json.loads(metrics.read_text())))
    elif (folder / ERROR_FILE).exists():
        job.error = (folder / ERROR_FILE).read_text().strip()
    else:
        job.error = "no metrics.json and no error.txt: still running, or killed"
    return job


def read_jobs(sweep_dir: Path) -> list[Job]:
    """Every job folder (one holding .hydra/overrides.yaml), in job-number order."""
    folders = [p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")]
    number = lambda f: (int(f.name.split("_")[0]) if f.name.split("_")[0].isdigit() else math.inf, f.name)  # noqa: E731
    return [read_job(f) for f in sorted(folders, key=number)]


def describe(values: list[float]) -> dict[str, float | None]:
    """median, mean, sample std (None for a single run), min, max."""
    return {
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else None,
        "min": min(values),
        "max": max(values),
    }


def rounded(value: float | None) -> float | str:
    return "" if value is None else round(value, DIGITS)


def aggregate(jobs: list[Job]) -> list[dict[str, Any]]:
    """One row per (group, metric) over the group's successful runs, metrics in name order."""
    groups: dict[str, list[Job]] = {}
    shared = shared_overrides(jobs)
    for job in jobs:
        if job.error is None:
            groups.setdefault(job.group(shared), []).append(job)
    rows = []
    for group, members in groups.items():
        for metric in sorted({m for job in members for m in job.metrics}):
            values = [job.metrics[metric] for job in members if metric in job.metrics]
            seeds = " ".join(job.seed for job in members if metric in job.metrics)
            rows.append({"group": group, "metric": metric, "n": len(values), "seeds": seeds, **describe(values)})
    return rows


def varying(rows: list[dict[str, Any]], jobs: list[Job]) -> list[dict[str, Any]]:
    """The rows whose metric differs between some runs (constant counts and settings are noise)."""
    distinct: dict[str, set[float]] = {}
    for job in jobs:
        for metric, value in job.metrics.items():
            distinct.setdefault(metric, set()).add(value)
    return [row for row in rows if len(distinct[row["metric"]]) > 1]


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def markdown(rows: list[dict[str, Any]], jobs: list[Job], omitted: int) -> str:
    failed = [job for job in jobs if job.error is not None]
    lines = [
        f"# Sweep summary: {len(jobs)} jobs, {len(jobs) - len(failed)} finished, {len(failed)} failed",
        "",
        "Runs differing only in `seed` are grouped; std is the sample standard deviation (n-1).",
        "",
        f"Overrides of every job: `{' '.join(o for o in jobs[0].overrides if o in shared_overrides(jobs))}`",
        "",
        "| group | metric | n | median | mean | std | min | max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        stats = " | ".join(str(rounded(row[s])) for s in STATS)
        lines.append(f"| {row['group']} | {row['metric']} | {row['n']} | {stats} |")
    if omitted:
        lines += ["", f"{omitted} metrics equal in every run are left out here (see summary.csv, runs.csv)."]
    if failed:
        lines += ["", "## Failed jobs", "", "| job | overrides | error |", "| --- | --- | --- |"]
        for job in failed:
            error = job.error.splitlines()[-1].replace("|", "\\|")
            lines.append(f"| {job.name} | {' '.join(job.overrides)} | {error} |")
    return "\n".join(lines) + "\n"


def summarize(sweep_dir: Path) -> Path | None:
    """Write runs.csv, summary.csv and summary.md into ``sweep_dir``; returns summary.md's path (None: no jobs)."""
    jobs = read_jobs(sweep_dir)
    if not jobs:
        return None
    metrics = sorted({m for job in jobs for m in job.metrics})
    write_csv(
        sweep_dir / "runs.csv",
        [
            {
                "job": job.name,
                "group": job.group(shared_overrides(jobs)),
                "seed": job.seed,
                "overrides": " ".join(job.overrides),
                "status": "failed" if job.error else "finished",
                "error": (job.error or "").splitlines()[-1] if job.error else "",
                **{m: rounded(v) for m, v in job.metrics.items()},
            }
            for job in jobs
        ],
        ["job", "group", "seed", "overrides", "status", "error", *metrics],
    )
    rows = aggregate(jobs)
    write_csv(
        sweep_dir / "summary.csv",
        [{**row, **{s: rounded(row[s]) for s in STATS}} for row in rows],
        ["group", "metric", "n", "seeds", *STATS],
    )
    shown = varying(rows, jobs)
    omitted = len({r["metric"] for r in rows}) - len({r["metric"] for r in shown})
    summary = sweep_dir / "summary.md"
    summary.write_text(markdown(shown, jobs, omitted))
    failed = sum(job.error is not None for job in jobs)
    print(f"sweep summary: {summary} ({len(jobs)} jobs, {failed} failed)", flush=True)
    if any(metric.startswith("eval/") for job in jobs for metric in job.metrics):
        from rpbench.leaderboard import Rows, leaderboard  # imports every benchmark: only for evaluated runs

        leaderboard([sweep_dir], sweep_dir, Rows())
    return summary


class SweepSummary(Callback):
    """Writes the summary when the multirun ends; ``pending`` names a sweep whose end Hydra did not reach
    (a job failed), for sweep.py to summarise anyway."""

    pending: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        SweepSummary.pending = Path(config.hydra.sweep.dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        SweepSummary.pending = None
        summarize(Path(config.hydra.sweep.dir))
