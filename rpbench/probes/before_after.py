"""Evaluation before and after neuron restraint, per dimension (RoleMRC Table 6).

Both inputs are results of ``rpbench.eval.evaluate.evaluate``. Reference metrics are compared per
``dimension`` (RoleMRC: the paper's five), else per ``shift`` (RPGBench), else per task label, plus
overall; judge accuracy per dimension (the five) plus overall, when both evaluations were judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rpbench.eval.judge.rolemrc_rubrics import in_paper_order
from rpbench.eval.report import fmt_metric, fmt_percent

GROUPINGS = ("dimension", "shift", "task")


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def metric_groups(metrics: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """{group: {metric: summary}}: overall first, then the finest breakdown the evaluation has."""
    grouping = next((g for g in GROUPINGS if metrics.get(g)), None)
    return {"overall": metrics["overall"], **(in_paper_order(metrics[grouping]) if grouping else {})}


def compare_metrics(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, dict]]:
    """{group: {metric: {n, before, after, delta}}} of the metric means, groups as in `before`."""
    before_groups, after_groups = metric_groups(before), metric_groups(after)
    if list(before_groups) != list(after_groups):
        raise ValueError(f"the two evaluations have different groups: {list(before_groups)} vs {list(after_groups)}")
    table: dict[str, dict[str, dict]] = {}
    for group, summaries in before_groups.items():
        table[group] = {}
        for metric, summary in summaries.items():
            after_summary = after_groups[group][metric]
            table[group][metric] = {
                "n": summary["n"],
                "before": summary["mean"],
                "after": after_summary["mean"],
                "delta": _delta(summary["mean"], after_summary["mean"]),
            }
    return table


def compare_judge(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict]:
    """{dimension: {n, judged_before, judged_after, before, after, delta}} of judge accuracy, then overall."""
    groups = {**in_paper_order(before["dimensions"]), "overall": before["overall"]}
    after_groups = {**after["dimensions"], "overall": after["overall"]}
    return {
        g: {
            "n": t["n"],
            "judged_before": t["judged"],
            "judged_after": after_groups[g]["judged"],
            "before": t["accuracy"],
            "after": after_groups[g]["accuracy"],
            "delta": _delta(t["accuracy"], after_groups[g]["accuracy"]),
        }
        for g, t in groups.items()
    }


def before_after(baseline: Mapping[str, Any], restrained: Mapping[str, Any]) -> dict[str, Any]:
    """The machine-readable Table 6: reference metrics and (when judged) judge accuracy."""
    table: dict[str, Any] = {"metrics": compare_metrics(baseline["metrics"], restrained["metrics"])}
    if "judge" in baseline and "judge" in restrained:
        table["judge"] = compare_judge(baseline["judge"], restrained["judge"])
    return table


def _rows(groups: Mapping[str, Mapping[str, Any]], label: str, metric: str | None = None) -> list[str]:
    """Baseline / restrained / Δ rows: judge accuracy in % (``metric`` None), metrics as RoleMRC prints them."""

    def fmt(value, signed=False):
        return fmt_percent(value, signed) if metric is None else fmt_metric(value, metric, signed)

    return [
        f"| {label} baseline | " + " | ".join(fmt(g["before"]) for g in groups.values()) + " |",
        f"| {label} restrained | " + " | ".join(fmt(g["after"]) for g in groups.values()) + " |",
        f"| {label} Δ | " + " | ".join(fmt(g["delta"], signed=True) for g in groups.values()) + " |",
    ]


def markdown(table: Mapping[str, Any]) -> str:
    """Rows baseline / restrained / Δ, one column per dimension (metrics 0-1, judge accuracy in %)."""
    lines: list[str] = []
    if "judge" in table:
        judge = table["judge"]
        lines += [
            "Judge accuracy; judged before / after: "
            + ", ".join(f"{g} {t['judged_before']} / {t['judged_after']} of {t['n']}" for g, t in judge.items()),
            "",
            "| judge | " + " | ".join(judge) + " |",
            "| --- |" + " --- |" * len(judge),
            *_rows(judge, "accuracy"),
            "",
        ]
    by_group = table["metrics"]
    groups = list(by_group)
    lines += [
        "Reference metrics (mean; n per group: "
        + ", ".join(f"{g} {next(iter(by_group[g].values()))['n']}" for g in groups)
        + ")",
        "",
        "| metric | " + " | ".join(groups) + " |",
        "| --- |" + " --- |" * len(groups),
    ]
    for metric in by_group["overall"]:
        lines += _rows({g: by_group[g][metric] for g in groups}, metric, metric)
    return "\n".join(lines)
