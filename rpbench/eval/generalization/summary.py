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

Bound vs R-EMID (``bound_vs_remid``), as the paper: per sample size n, Theorem 3.4's bound from n samples
per split (``eval.generalization.convergence``, the mean over its repeats) against the R-EMID of all the
category's samples, over (run, shifted category) points; "largest" takes each point's largest subsample
(the smaller split's size). A point without n samples is named in ``missing``.

Runs are correlated only when scored alike: their ``eval.generalization.provenance`` (critic, reasoner,
adapters, encoder and its fallback, prompt digests, analysis settings; ``provenance``) and their WinRate
judges and judge prompt version must agree, no critic may be the evaluated model (critic=self), and every
run must record a provenance. Otherwise it is an error naming the runs and the keys; ``allow_mixed``
correlates them anyway and the summary states what differs (``comparability``). The packaged fallback
encoder is named whenever a run used it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from rpbench.eval.generalization.correlation import correlate, winrate_drop
from rpbench.eval.generalization.provenance import differing

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
    missing = [key for key in ("winrate", "jsd", "generalization") if key not in ev]
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


def _scored_alike(ev: Mapping[str, Any]) -> dict[str, Any] | None:
    """What must agree across runs: the provenance plus the WinRate judges (None: no provenance recorded)."""
    provenance = ev.get("generalization", {}).get("provenance")
    if provenance is None:
        return None
    w = ev["winrate"]
    return {**provenance, "winrate": {"judges": w["judges"], "prompt_version": w["prompt_version"]}}


def comparability(evals: Mapping[str, Mapping[str, Any]], allow_mixed: bool) -> dict[str, Any]:
    """Whether the runs were scored alike (module docstring): the differing keys per run, the runs without a
    provenance, with critic=self, with the fallback encoder. An error naming them, unless ``allow_mixed``."""
    scored = {run: _scored_alike(ev) for run, ev in evals.items()}
    known = {run: p for run, p in scored.items() if p is not None}
    found: dict[str, Any] = {
        "differing": differing(known),
        "without_provenance": sorted(run for run, p in scored.items() if p is None),
        "critic_self": sorted(run for run, p in known.items() if p["critic"]["is_evaluated_model"]),
        "encoder_fallback": sorted(run for run, p in known.items() if p["encoder"]["fallback_used"]),
    }
    problems = [
        f"{key} differs: " + ", ".join(f"{run}={value!r}" for run, value in values.items())
        for key, values in found["differing"].items()
    ]
    if found["without_provenance"]:
        problems.append(
            f"no eval.generalization.provenance (an older rpbench's metrics.json?): {found['without_provenance']}"
        )
    if found["critic_self"]:
        problems.append(f"critic=self (EMI not comparable across models): {found['critic_self']}")
    found["mixed"] = bool(problems)
    if problems and not allow_mixed:
        raise ValueError(
            f"runs {list(evals)} were not scored alike, so their points would not be comparable:\n  "
            + "\n  ".join(problems)
            + "\n(--allow-mixed / allow_mixed=True correlates them anyway and states these differences)"
        )
    found["problems"] = problems
    return found


def bound_vs_remid(
    evals: Mapping[str, Mapping[str, Any]], emid_key: str, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """Per n (``samples_per_split``): the bound from n samples (mean over repeats) vs the full-data R-EMID over
    (run, shifted category) points, Pearson and Spearman with bootstrap intervals (module docstring)."""
    sizes = sorted({n for ev in evals.values() for n in ev["generalization"]["settings"]["convergence_sizes"]})
    at_n: dict[int | str, dict[tuple[str, str], list[float]]] = {n: {} for n in [*sizes, "largest"]}
    full: dict[tuple[str, str], float] = {}
    for run, ev in evals.items():
        convergence = ev["generalization"]["convergence"]
        if convergence["empirical"] != emid_key:
            raise ValueError(f"{run}: convergence is of {convergence['empirical']}, the summary's metric {emid_key}")
        for category, points in convergence["points"].items():
            key = (run, category)
            full[key] = _value(ev[emid_key], category, run, f"{emid_key}[...]")
            largest = max(p["n"] for p in points)
            for p in points:
                for label in ([p["n"]] if p["n"] in at_n else []) + (["largest"] if p["n"] == largest else []):
                    at_n[label].setdefault(key, []).append(p["bound"])
    rows = []
    for label in at_n:
        bounds = {key: sum(values) / len(values) for key, values in at_n[label].items()}
        row: dict[str, Any] = {
            "samples_per_split": label,
            "points": [{"run": r, "category": c, "bound": b, emid_key: full[r, c]} for (r, c), b in bounds.items()],
            "missing": sorted(f"{r}/{c}" for r, c in set(full) - set(bounds)),
        }
        if len(bounds) >= 3:
            row.update(correlate(bounds, {key: full[key] for key in bounds}, **settings).as_dict())
        else:
            row["undefined"] = f"{len(bounds)} points (a correlation needs 3)"
        rows.append(row)
    return {
        "bound": "Theorem 3.4 from n samples per split, the mean over the convergence repeats",
        "empirical": f"{emid_key} on all the category's samples (the paper's)",
        "by_n": rows,
    }


def summarize_runs(
    run_dirs: Sequence[Path],
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    score_with_id: bool = False,
    allow_mixed: bool = False,
) -> dict[str, Any]:
    """Score and drop correlations over the runs in ``run_dirs``, their points, the bound vs R-EMID per n, and
    the severity points of the pilot figure; runs not scored alike are refused unless ``allow_mixed``
    (module docstring)."""
    evals = {name: read_eval(Path(d)) for name, d in zip(run_names(run_dirs), run_dirs)}
    with_r = {run: "r_emi" in ev for run, ev in evals.items()}
    if len(set(with_r.values())) > 1:
        raise ValueError(f"some runs have R-EMI and some only EMI: {with_r}")
    alike = comparability(evals, allow_mixed)
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
        "bound_vs_remid": bound_vs_remid(evals, emid_key, settings),
        "comparability": alike,
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
        lines.append(f"| {setting}: {c['metric']} vs {c['judge']} | {c['n']} | {_coefficients(c)} |")
    b = summary["bound_vs_remid"]
    lines += [
        f"\nBound vs {b['empirical']}; bound: {b['bound']}.\n",
        "| samples per split | points | missing | Pearson r | p | CI | Spearman ρ | p | CI | "
        "undefined resamples (r / ρ) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in b["by_n"]:
        cells = _coefficients(row) if "undefined" not in row else f"{row['undefined']} | – | – | – | – | – | – | –"
        lines.append(f"| {row['samples_per_split']} | {len(row['points'])} | {len(row['missing'])} | {cells} |")
    return "\n".join(lines + comparability_lines(summary["comparability"])) + "\n"


def _coefficients(c: Mapping[str, Any]) -> str:
    return (
        f"{c['pearson_r']:.3f} | {c['pearson_p']:.2g} | {_ci(c['pearson_ci'])} | {c['spearman_rho']:.3f} | "
        f"{c['spearman_p']:.2g} | {_ci(c['spearman_ci'])} | "
        f"{c['pearson_ci']['undefined_resamples']} / {c['spearman_ci']['undefined_resamples']}"
    )


def comparability_lines(alike: Mapping[str, Any]) -> list[str]:
    """What the summary says about how alike the runs were scored (``comparability``)."""
    lines = []
    if alike["encoder_fallback"]:
        lines.append(
            f"\nThe packaged fallback encoder (English only) stood in for the JS encoder in: "
            f"{', '.join(alike['encoder_fallback'])}."
        )
    if alike["mixed"]:
        lines.append("\n**Mixed runs (--allow-mixed): these points were not scored alike.**\n")
        lines += [f"- {problem}" for problem in alike["problems"]]
    return lines


def plot_severity_across_runs(summary: Mapping[str, Any], path: Path) -> Path:
    """``severity_across_runs_figure`` written to ``path``."""
    severity_across_runs_figure(summary).savefig(path, dpi=120)
    return path


def severity_across_runs_figure(summary: Mapping[str, Any]) -> Figure:
    """The pilot figure across runs: JS severity vs WinRate per shifted category, one marker series per run
    (named in a legend below the plot), each category numbered once at its first point and named in a key beside
    the plot (names written at the points overlap)."""
    points = summary["points"]["severity"]
    markers = "osD^v<>ph*X"
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.subplots()
    for k, run in enumerate(summary["runs"]):
        mine = [p for p in points if p["run"] == run]
        ax.scatter(
            [p["js_severity"] for p in mine], [p["winrate"] for p in mine], marker=markers[k % len(markers)], label=run
        )
    first = {}
    for p in sorted(points, key=lambda p: p["js_severity"]):
        first.setdefault(p["category"], p)
    key = []
    for number, (category, p) in enumerate(first.items(), 1):
        ax.annotate(str(number), (p["js_severity"], p["winrate"]), textcoords="offset points", xytext=(4, 4))
        key.append(f"{number:>2}  {category}")
    ax.text(1.03, 1, "\n".join(key), transform=ax.transAxes, va="top", fontsize=8, family="monospace")
    ax.set_xlabel("JS severity (user + character + dialogue)")
    ax.set_ylabel("WinRate (judge ensemble mean)")
    ax.set_title(f"WinRate against shift severity per shifted category, {len(summary['runs'])} runs", fontsize=10)
    fig.legend(loc="outside lower center", fontsize=7)
    return fig


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
