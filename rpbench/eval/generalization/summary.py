"""Multi-model summary of ``evaluator=rpgbench`` runs, as the paper correlates 11 models x 11 subtypes:
R-EMI against WinRate per (run, category) (the score setting) and R-EMID against the WinRate
difference WinRate(IDTest) - WinRate(category) per (run, shifted category) (the drop setting), with
Pearson and Spearman, their p-values and bootstrap intervals (``correlation``); and the pilot figure
across runs (JS severity vs WinRate per category, one marker series per run).

Each run folder's metrics.json (under ``eval``) gives ``r_emi[category]["emi"]``, ``r_emid[category]``,
``jsd[category]`` and ``winrate["by_category"][category]["winrate"]`` (the judge ensemble's). Runs without
reasoning give plain ``emi`` / ``emid``, and the summary says which it used; mixing the two is an error.
A point missing either value (e.g. a category without WinRate: every judgement failed) is an error
naming the run, the category and the field; nothing is dropped.

The score setting takes the shifted categories by default (the paper's 121 = 11 models x 11 shift
subtypes); ``score_with_id`` adds each run's IDTest point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.eval.generalization.correlation import correlate, winrate_drop

ID_CATEGORY = "IDTest"  # the in-distribution category: every in-distribution test record's
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


def js_severity(severity: Mapping[str, float]) -> float:
    """One severity number per shifted category: the sum of the three input JS terms."""
    return severity["user"] + severity["character"] + severity["dialogue"]


def read_eval(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no metrics.json (not a finished run folder)")
    ev = json.loads(path.read_text(encoding="utf-8")).get("eval", {})
    missing = [key for key in ("winrate", "jsd") if key not in ev]
    missing += [] if "r_emi" in ev or "emi" in ev else ["r_emi (or emi)"]
    if missing:
        raise ValueError(f"{path}: eval lacks {missing}; run it with evaluator=rpgbench and a judge")
    if "by_category" not in ev["winrate"]:
        raise ValueError(f"{path}: eval.winrate has no by_category (metrics.json from an older rpbench?)")
    return ev


def _value(table: Mapping[str, Any], category: str, run: str, field: str, pick=lambda v: v) -> float:
    if category not in table or pick(table[category]) is None:
        raise ValueError(f"{run}: no {field} for category {category!r}")
    return float(pick(table[category]))


def _winrate(ev: Mapping[str, Any], category: str, run: str) -> float:
    return _value(ev["winrate"]["by_category"], category, run, 'winrate["by_category"][...]["winrate"]', _rate)


def _rate(entry: Mapping[str, Any]) -> float | None:
    return entry["winrate"]


def _emi(entry: Mapping[str, Any]) -> float:
    return entry["emi"]


def run_names(run_dirs: Sequence[Path]) -> list[str]:
    """Each run by its folder name (no machine path in the results); names must differ."""
    names = [Path(d).resolve().name for d in run_dirs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"run folders must have different names, repeated: {repeated}")
    return names


def summarize_runs(
    run_dirs: Sequence[Path],
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    score_with_id: bool = False,
) -> dict[str, Any]:
    """Score and drop correlations over the runs in ``run_dirs``, their points, and the severity points
    of the pilot figure (module docstring)."""
    evals = {name: read_eval(Path(d)) for name, d in zip(run_names(run_dirs), run_dirs)}
    with_r = {run: "r_emi" in ev for run, ev in evals.items()}
    if len(set(with_r.values())) > 1:
        raise ValueError(f"some runs have R-EMI and some only EMI: {with_r}")
    reasoning = all(with_r.values())
    emi_key, emid_key = ("r_emi", "r_emid") if reasoning else ("emi", "emid")
    score, drop, severity = [], [], []
    for run, ev in evals.items():
        if emid_key not in ev:
            raise ValueError(f"{run}: eval has {emi_key} but no {emid_key}")
        judged = set(ev["winrate"]["by_category"])
        shifted = sorted((set(ev[emi_key]) | set(ev[emid_key]) | judged) - {ID_CATEGORY})
        for category in ([ID_CATEGORY] if score_with_id else []) + shifted:
            metric = _value(ev[emi_key], category, run, f'{emi_key}[...]["emi"]', _emi)
            score.append({"run": run, "category": category, emi_key: metric, "winrate": _winrate(ev, category, run)})
        base = _winrate(ev, ID_CATEGORY, run)
        for category in shifted:
            metric = _value(ev[emid_key], category, run, f"{emid_key}[...]")
            judged_drop = winrate_drop(base, _winrate(ev, category, run))
            drop.append({"run": run, "category": category, emid_key: metric, "winrate_drop": judged_drop})
            js = _value(ev["jsd"], category, run, "jsd[...]", js_severity)
            severity.append(
                {"run": run, "category": category, "js_severity": js, "winrate": _winrate(ev, category, run)}
            )
    settings = {"n_resamples": n_resamples, "seed": seed, "confidence": CONFIDENCE}

    def correlation(points: list[dict[str, Any]], metric: str, judge: str) -> dict[str, Any]:
        keyed = {(p["run"], p["category"]): p for p in points}
        values = correlate(
            {k: p[metric] for k, p in keyed.items()}, {k: p[judge] for k, p in keyed.items()}, **settings
        )
        return values.as_dict()

    return {
        "metric": "R-EMI / R-EMID" if reasoning else "EMI / EMID (no reasoning in these runs: no R-EMI)",
        "runs": list(evals),
        "score_categories": "IDTest and the shifted categories" if score_with_id else "the shifted categories",
        "bootstrap": {**settings, "method": "percentile; (run, category) points resampled with replacement"},
        "score": {"metric": emi_key, "judge": "winrate", **correlation(score, emi_key, "winrate")},
        "drop": {"metric": emid_key, "judge": "winrate_drop", **correlation(drop, emid_key, "winrate_drop")},
        "points": {"score": score, "drop": drop, "severity": severity},
    }


def _ci(interval: Mapping[str, Any]) -> str:
    if interval["low"] is None:
        return "–"
    return f"[{interval['low']:.3f}, {interval['high']:.3f}]"


def markdown(summary: Mapping[str, Any]) -> str:
    """The correlation table of ``summary`` (``summarize_runs``)."""
    b = summary["bootstrap"]
    lines = [
        f"Metric: {summary['metric']}; {len(summary['runs'])} runs; score setting over "
        f"{summary['score_categories']}. Intervals: {100 * b['confidence']:.0f}% bootstrap, {b['method']}, "
        f"{b['n_resamples']} resamples, seed {b['seed']}.\n",
        "| setting | points | Pearson r | p | CI | Spearman ρ | p | CI | undefined resamples (r / ρ) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for setting in ("score", "drop"):
        c = summary[setting]
        lines.append(
            f"| {setting}: {c['metric']} vs {c['judge']} | {c['n']} | {c['pearson_r']:.3f} | {c['pearson_p']:.2g} | "
            f"{_ci(c['pearson_ci'])} | {c['spearman_rho']:.3f} | {c['spearman_p']:.2g} | {_ci(c['spearman_ci'])} | "
            f"{c['pearson_ci']['undefined_resamples']} / {c['spearman_ci']['undefined_resamples']} |"
        )
    return "\n".join(lines) + "\n"


def plot_severity_across_runs(summary: Mapping[str, Any], path: Path) -> Path:
    """The pilot figure across runs: JS severity vs WinRate per shifted category, one marker series per
    run, each category named once at its severity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = summary["points"]["severity"]
    markers = "osD^v<>ph*X"
    fig, ax = plt.subplots(figsize=(7, 5))
    for k, run in enumerate(summary["runs"]):
        mine = [p for p in points if p["run"] == run]
        ax.scatter(
            [p["js_severity"] for p in mine], [p["winrate"] for p in mine], marker=markers[k % len(markers)], label=run
        )
    named: set[str] = set()
    for p in points:
        if p["category"] not in named:
            named.add(p["category"])
            ax.annotate(p["category"], (p["js_severity"], p["winrate"]), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("JS severity (user + character + dialogue)")
    ax.set_ylabel("WinRate (judge ensemble mean)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_summary(summary: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    """summary.json, summary.md and js_vs_winrate.png in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "summary.json",
        "markdown": out_dir / "summary.md",
        "plot": out_dir / "js_vs_winrate.png",
    }
    paths["json"].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(summary), encoding="utf-8")
    plot_severity_across_runs(summary, paths["plot"])
    return paths
