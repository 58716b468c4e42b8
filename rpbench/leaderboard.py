"""One leaderboard from many runs: ``python -m rpbench.leaderboard <run or sweep folders...> [--out DIR]``.

Every folder holding a metrics.json (the folders given, or below them) is a run. A row is the evaluated model
(``model``, and the objective that trained it); a column group is a benchmark (``evaluator``), showing the first
of the benchmark's declared ``headlines`` the run's results hold, with its 95% CI (from metrics.json, or a
percentile bootstrap over the run's scores.jsonl when metrics.json has none). A cell's identity is the
headline, the judge (backend and model, each judge of an ensemble), the test records' content hash
(``records.test.records_sha256``) and the rpbench version. Runs of one cell with one identity are seeds: the
median run is shown (the lower one of an even count). Runs of one cell with different identities are never
combined (the cell is a conflict), and a cell whose judge, data or headline differs from its column's most
common one is flagged and left out of that column's ranks: only like is ranked with like. A missing cell is
shown as missing. A run marked ``failed`` in its metrics.json (its results rest on nothing) is skipped, with why.

The overall rank is the mean of a model's ranks over the benchmarks it is ranked in (1: best; ties share the
mean rank), with their spread (min-max); adjacent models in that order are compared per benchmark by a paired
bootstrap on the records both runs scored (scores.jsonl ids).

Writes leaderboard.md, leaderboard.csv (one row per cell, with identities and runs) and leaderboard.png.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rpbench.core.errors import RpbenchError
from rpbench.eval.benchmarks import BENCHMARKS
from rpbench.eval.benchmarks.base import Headline
from rpbench.eval.stats import paired_bootstrap, summarize
from rpbench.scoring.human_agreement import average_ranks

UNRECORDED = "unrecorded"  # an identity field an earlier rpbench did not write
BOOTSTRAP = {"n_resamples": 1000, "confidence": 0.95, "seed": 0}


class RunFolderError(RpbenchError):
    """A run folder whose files cannot be read as a run's (the message names the file): the run is skipped
    and listed with why, the rest of the board is still built."""


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; a RunFolderError naming it otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RunFolderError(f"{path}: not JSON ({error.msg} at char {error.pos})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunFolderError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None
    if not isinstance(value, dict):
        raise RunFolderError(f"{path}: a JSON object expected, got {type(value).__name__}")
    return value


def read_config(path: Path) -> dict[str, Any]:
    """The run's config.yaml (empty when the run has none); a RunFolderError naming it when unreadable."""
    if not path.exists():
        return {}
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise RunFolderError(f"{path}: cannot be read as YAML ({type(error).__name__}: {error})") from None
    if value is not None and not isinstance(value, dict):
        raise RunFolderError(f"{path}: a mapping expected, got {type(value).__name__}")
    return value or {}


@dataclass(frozen=True)
class Identity:
    """What a cell's number depends on besides the model: never averaged or ranked across."""

    headline: str
    judge: str
    data: str
    version: str

    def comparable(self) -> tuple[str, str, str]:
        return self.headline, self.judge, self.data


@dataclass
class Cell:
    """One run's headline on one benchmark."""

    row: str
    benchmark: str
    run: str
    identity: Identity
    value: float | None
    ci_low: float | None
    ci_high: float | None
    higher_is_better: bool
    units: dict[str, float | None] = field(default_factory=dict)  # scores.jsonl unit -> score
    judge_cost: dict[str, float] = field(default_factory=dict)  # requests, tokens, cost_usd: summed over its runs
    seeds: int = 1
    conflict: str | None = None  # the cell's runs differ in identity
    flag: str | None = None  # the cell differs from its column's identity
    other_version: bool = False  # written by another rpbench version than most of its column (ranked, shown)


def find_runs(folders: Iterable[Path]) -> list[Path]:
    """Each folder holding a metrics.json, at or below ``folders``, in path order."""
    runs: set[Path] = set()
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such folder")
        runs.update(p.parent for p in folder.rglob("metrics.json"))
    return sorted(runs)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RunFolderError(f"{where}: a mapping expected, got {value!r}")
    return value


def judge_identity(config: Mapping[str, Any], where: str = "config.yaml") -> str:
    """``backend:model`` of the run's judge (each judge of an ``evaluator.judges`` ensemble); ``none``."""
    judge = _mapping(config.get("judge"), f"{where}: judge")
    backend = judge.get("backend", UNRECORDED)
    if backend == "none":
        return "none"
    if backend == "local":
        served = _mapping(judge.get("server"), f"{where}: judge.server").get("model")
        model = served.get("name") if isinstance(served, Mapping) else served
    else:
        model = judge.get("model")
    names = [f"{backend}:{model}"]
    extras = _mapping(config.get("evaluator"), f"{where}: evaluator").get("judges") or []
    if not isinstance(extras, list):
        raise RunFolderError(f"{where}: evaluator.judges: a list of judges expected, got {extras!r}")
    for k, extra in enumerate(extras):
        extra = _mapping(extra, f"{where}: evaluator.judges[{k}]")
        names.append(f"{extra.get('backend', backend)}:{extra.get('model', model)}")
    return "+".join(names)


def find(tree: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def headline_of(
    headlines: Sequence[Headline], evaluation: Mapping[str, Any], where: str = "metrics.json"
) -> tuple[Headline, Any] | None:
    """The first declared headline the results hold, with the mapping (or number) it names; a RunFolderError
    when that number is not finite (NaN is never shown or ranked)."""
    for headline in headlines:
        found = find(evaluation, headline.path)
        value = found if not headline.value else find(found, [headline.value])
        if _is_number(value):
            if not math.isfinite(value):
                key = ".".join(("eval", *headline.path, *([headline.value] if headline.value else [])))
                raise RunFolderError(f"{where}: {key} (the {headline.label} headline) is {value}: not ranked")
            return headline, found
    return None


def score_units(run: Path, how: str) -> dict[str, float | None]:
    """The run's per-record scores as ``how`` reads them (``Headline.scores``), keyed by record (and verdict);
    a RunFolderError naming the file and line of a row that does not hold them."""
    path = run / "scores.jsonl"
    if not how or not path.exists():
        return {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise RunFolderError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None
    units: dict[str, float | None] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise RunFolderError(f"{where}: not JSON ({error.msg})") from None
        if not isinstance(row, dict) or "id" not in row:
            raise RunFolderError(f"{where}: a JSON object with an id expected")
        where += f" (record {row['id']!r})"
        if how == "verdicts":
            for rubric, verdict in _mapping(row.get("verdicts"), f"{where}: verdicts").items():
                for i, v in enumerate(verdict if isinstance(verdict, list) else [verdict]):
                    units[f"{row['id']}|{rubric}|{i}"] = _unit(v, f"{where}: verdicts.{rubric}")
        else:
            kind, name = how.split("/", 1)
            scores = _mapping(row.get(kind), f"{where}: {kind}")
            if name not in scores:
                raise RunFolderError(f"{where}: no {kind}.{name}")
            units[str(row["id"])] = _unit(scores[name], f"{where}: {kind}.{name}")
    return units


def _unit(value: Any, where: str) -> float | None:
    """A record's score: a finite number, or None (not scored)."""
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(value):
        raise RunFolderError(f"{where}: a finite number or null expected, got {value!r}")
    return float(value)


def _bound(entry: Any, key: str, where: str) -> float | None:
    value = entry.get(key) if isinstance(entry, Mapping) else None
    if value is not None and (not _is_number(value) or not math.isfinite(value)):
        raise RunFolderError(f"{where}: {key}={value!r}: a finite number or null expected")
    return value


def judge_cost(results: Mapping[str, Any], where: str) -> dict[str, float]:
    """requests, tokens and cost_usd of ``eval.judge_cost`` (empty when the run recorded none)."""
    cost = _mapping(results["eval"].get("judge_cost"), f"{where}: eval.judge_cost")
    if "requests" not in cost:
        return {}
    needed = ("requests", "prompt_tokens", "completion_tokens", "cost_usd")
    bad = [k for k in needed if not _is_number(cost.get(k)) or not math.isfinite(cost[k])]
    if bad:
        raise RunFolderError(f"{where}: eval.judge_cost has no number for {', '.join(bad)}")
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    return {"requests": cost["requests"], "tokens": tokens, "cost_usd": cost["cost_usd"]}


def read_cell(run: Path) -> tuple[Cell | None, str | None]:
    """The run's cell, or None and why it has none; a RunFolderError naming the file that cannot be read."""
    run = Path(os.path.relpath(run))  # as the user named it, relative: no machine path in the leaderboard
    metrics = run / "metrics.json"
    results = read_json(metrics)
    benchmark = results.get("evaluator", "none")
    if not isinstance(benchmark, str):
        raise RunFolderError(f"{metrics}: evaluator: a benchmark name expected, got {benchmark!r}")
    if benchmark == "none" or "eval" not in results:
        return None, "no evaluation"
    if not isinstance(results["eval"], Mapping):
        raise RunFolderError(f"{metrics}: eval: a mapping of results expected, got {type(results['eval']).__name__}")
    if results.get("failed"):  # its results rest on nothing (rpbench.pipeline.RunFailed): never ranked
        return None, f"failed: {results['failed']}"
    if benchmark not in BENCHMARKS.names():
        return None, f"evaluator {benchmark!r} is not registered here (a plugin's?)"
    found = headline_of(BENCHMARKS.get(benchmark).headlines, results["eval"], str(metrics))
    if found is None:
        return None, f"no headline of {benchmark} in its results"
    headline, entry = found
    config_path = run / "config.yaml"
    judge = judge_identity(read_config(config_path), str(config_path))
    data = str(find(results, ["records", "test", "records_sha256"]) or UNRECORDED)
    identity = Identity(headline.label, judge, data, str(results.get("rpbench_version", UNRECORDED)))
    value = float(entry) if not headline.value else float(entry[headline.value])
    units = score_units(run, headline.scores)
    low, high = _bound(entry, "ci_low", str(metrics)), _bound(entry, "ci_high", str(metrics))
    if low is None and units:
        summary = summarize(list(units.values()), **BOOTSTRAP)
        low, high = summary["ci_low"], summary["ci_high"]
    model = str(results.get("model"))
    objective = results.get("objective", "none")
    row = model if objective == "none" else f"{model} + {objective}"
    cell = Cell(row, benchmark, str(run), identity, value, low, high, headline.higher_is_better, units)
    cell.judge_cost = judge_cost(results, str(metrics))
    return cell, None


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


def md(text: Any) -> str:
    """``text`` as one markdown table cell: ``|`` escaped, line breaks as spaces (a name cannot add a row)."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").splitlines())


def csv_safe(value: Any) -> Any:
    """A text value a spreadsheet would run as a formula (=, +, -, @, tab, CR first) quoted with a leading '."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def cell_text(cell: Cell | None) -> str:
    if cell is None:
        return "missing"
    if cell.conflict:
        return f"conflict ({cell.conflict})"
    text = f"{_number(cell.value)} [{_number(cell.ci_low)}, {_number(cell.ci_high)}]"
    if cell.seeds > 1:
        text += f" (median of {cell.seeds})"
    if cell.other_version:
        text += f" (rpbench {cell.identity.version})"
    return text + (f" ⚠ {cell.flag}" if cell.flag else "")


def markdown(board: Leaderboard) -> str:
    lines = [
        "# Leaderboard",
        "",
        "Each benchmark's headline with its 95% CI; rank 1 is best. Flagged cells (judge, data or headline unlike",
        "their column's) and conflicts are not ranked; a missing cell is missing, never 0. A cell written by another",
        "rpbench version than most of its column names it.",
        "",
        "| model | mean rank (min-max, benchmarks) | " + " | ".join(map(md, board.benchmarks)) + " |",
        "| --- | --- |" + " --- |" * len(board.benchmarks),
    ]
    for row in board.rows:
        o = board.overall[row]
        overall = (
            "–" if o["mean_rank"] is None else f"{o['mean_rank']:.2f} ({o['min']:g}-{o['max']:g}, {o['benchmarks']})"
        )
        cells = [md(cell_text(board.cells.get((row, b)))) for b in board.benchmarks]
        lines.append(f"| {md(row)} | {overall} | " + " | ".join(cells) + " |")
    lines += ["", "## Adjacent models (paired bootstrap on shared records; delta = lower - upper)", ""]
    lines += [
        "| upper | lower | benchmark | shared | delta | 95% CI | p |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in board.adjacent:
        ci = f"[{_number(t.get('ci_low'))}, {_number(t.get('ci_high'))}]"
        p = "–" if t.get("p_value") is None else f"{t['p_value']:.4f}"
        delta = _number(t.get("delta"))
        names = " | ".join(md(t[k]) for k in ("upper", "lower", "benchmark"))
        lines.append(f"| {names} | {t['shared_units']} | {delta} | {ci} | {p} |")
    lines += [
        "",
        "## What produced each cell",
        "",
        "| model | benchmark | headline | judge | test data sha256 | rpbench | runs |",
    ]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for (row, benchmark), c in sorted(board.cells.items()):
        i = c.identity
        shown = (row, benchmark, i.headline, i.judge, i.data[:16], i.version, c.run)
        lines.append("| " + " | ".join(map(md, shown)) + " |")
    if board.skipped:
        lines += ["", "## Runs without a cell", "", "| run | why |", "| --- | --- |"]
        lines += [f"| {md(run)} | {md(why)} |" for run, why in board.skipped]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = [
    "model", "benchmark", "headline", "value", "ci_low", "ci_high", "rank", "mean_rank", "seeds", "judge",
    "data_sha256", "rpbench_version", "flag", "conflict", "judge_requests", "judge_tokens", "judge_cost_usd", "runs",
]  # fmt: skip


def csv_rows(board: Leaderboard) -> list[dict[str, Any]]:
    out = []
    for row in board.rows:
        for benchmark in board.benchmarks:
            c = board.cells.get((row, benchmark))
            base = {"model": row, "benchmark": benchmark, "mean_rank": board.overall[row]["mean_rank"]}
            if c is None:
                out.append({**base, "flag": "missing"})
                continue
            i = c.identity
            out.append(
                {
                    **base,
                    **{"headline": i.headline, "value": c.value, "ci_low": c.ci_low, "ci_high": c.ci_high},
                    **{"rank": board.rank.get((row, benchmark)), "seeds": c.seeds, "judge": i.judge},
                    **{"data_sha256": i.data, "rpbench_version": i.version, "flag": c.flag, "conflict": c.conflict},
                    **{f"judge_{k}": v for k, v in c.judge_cost.items()},
                    "runs": c.run,
                }
            )
    return out


def plot(board: Leaderboard, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in board.rows if board.overall[r]["mean_rank"] is not None]
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(shown) + 1.5))
    y = list(range(len(shown)))[::-1]
    means = [board.overall[r]["mean_rank"] for r in shown]
    spread = [
        [m - board.overall[r]["min"] for r, m in zip(shown, means)],
        [board.overall[r]["max"] - m for r, m in zip(shown, means)],
    ]
    ax.errorbar(means, y, xerr=spread, fmt="o", capsize=4)
    ax.set_yticks(y, shown)
    ax.set_xlabel("mean rank over benchmarks (bars: min-max; 1 = best)")
    ax.invert_xaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(board: Leaderboard, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "leaderboard.md").write_text(markdown(board), encoding="utf-8")
    with open(out_dir / "leaderboard.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in csv_rows(board))
    plot(board, out_dir / "leaderboard.png")
    return out_dir / "leaderboard.md"


def leaderboard(folders: Sequence[Path], out_dir: Path) -> Path | None:
    """Write the leaderboard of the runs in ``folders`` into ``out_dir``; None when no run has a cell."""
    board = build(folders)
    for run, why in board.skipped:
        print(f"leaderboard: skipped {run}: {why}", file=sys.stderr, flush=True)
    if not board.cells:
        return None
    path = write(board, out_dir)
    print(f"leaderboard: {path} ({len(board.rows)} models, {len(board.benchmarks)} benchmarks)", flush=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rpbench.leaderboard", description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="run folders, or folders holding runs (sweeps)")
    parser.add_argument("--out", type=Path, default=Path("."), help="where to write leaderboard.md/.csv/.png")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out}: a file, not a folder to write the leaderboard into", file=sys.stderr)
        return 1
    try:
        written = leaderboard(args.folders, args.out)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if written is None:
        print(f"error: no run with a benchmark headline under {', '.join(map(str, args.folders))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
