"""Evaluation before and after neuron restraint, per dimension (RoleMRC Table 6).

Both inputs are results of ``rpbench.eval.evaluate.evaluate``. Reference metrics are compared per
``dimension`` (RoleMRC: the paper's five), else per ``shift`` (RPGBench), else per task label, plus
overall; judge accuracy per dimension (the five) plus overall, when both evaluations were judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rpbench.scoring.format import fmt_metric, fmt_percent
from rpbench.scoring.judge.rolemrc_rubrics import in_paper_order

GROUPINGS = ("dimension", "shift", "task")


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def metric_groups(metrics: Mapping[str, Any], grouping: str | None = None) -> dict[str, Mapping[str, Any]]:
    """{group: {metric: summary}}: overall, then the first breakdown of GROUPINGS the evaluation has
    (``grouping`` given: that breakdown alone)."""
    if grouping is not None:
        return dict(metrics[grouping])
    grouping = next((g for g in GROUPINGS if metrics.get(g)), None)
    return {"overall": metrics["overall"], **(in_paper_order(metrics[grouping]) if grouping else {})}


def compare_metrics(
    before: Mapping[str, Any], after: Mapping[str, Any], grouping: str | None = None
) -> dict[str, dict[str, dict]]:
    """{group: {metric: {n, before, after, delta}}} of the metric means, groups as in `before`."""
    before_groups, after_groups = metric_groups(before, grouping), metric_groups(after, grouping)
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


def compare_judge(before: Mapping[str, Any], after: Mapping[str, Any], level: str = "dimensions") -> dict[str, dict]:
    """{group: {n, judged_before, judged_after, before, after, delta}} of judge accuracy per dimension then
    overall (``level="rubrics"``: per rubric)."""
    groups = in_paper_order(before[level]) if level == "dimensions" else dict(before[level])
    after_groups = dict(after[level])
    if level == "dimensions":
        groups["overall"], after_groups["overall"] = before["overall"], after["overall"]
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
    """The machine-readable Table 6: reference metrics and (when judged) judge accuracy per dimension,
    and per rubric (RoleMRC's finer split) under ``*_by_rubric``."""
    table: dict[str, Any] = {"metrics": compare_metrics(baseline["metrics"], restrained["metrics"])}
    judged = "judge" in baseline and "judge" in restrained
    if judged:
        table["judge"] = compare_judge(baseline["judge"], restrained["judge"])
    if baseline["metrics"].get("rubric"):
        table["metrics_by_rubric"] = compare_metrics(baseline["metrics"], restrained["metrics"], "rubric")
        if judged:
            table["judge_by_rubric"] = compare_judge(baseline["judge"], restrained["judge"], "rubrics")
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


def _judge_lines(judge: Mapping[str, Mapping[str, Any]], title: str) -> list[str]:
    return [
        "Judge accuracy; judged before / after: "
        + ", ".join(f"{g} {t['judged_before']} / {t['judged_after']} of {t['n']}" for g, t in judge.items()),
        "",
        f"| {title} | " + " | ".join(judge) + " |",
        "| --- |" + " --- |" * len(judge),
        *_rows(judge, "accuracy"),
        "",
    ]


def _metric_lines(by_group: Mapping[str, Mapping[str, Any]]) -> list[str]:
    groups = list(by_group)
    lines = [
        "Reference metrics (mean; n per group: "
        + ", ".join(f"{g} {next(iter(by_group[g].values()))['n']}" for g in groups)
        + ")",
        "",
        "| metric | " + " | ".join(groups) + " |",
        "| --- |" + " --- |" * len(groups),
    ]
    for metric in by_group[groups[0]]:
        lines += _rows({g: by_group[g][metric] for g in groups}, metric, metric)
    return lines


def markdown(table: Mapping[str, Any]) -> str:
    """Rows baseline / restrained / Δ, one column per dimension (metrics 0-1, judge accuracy in %), then
    the same per rubric when the evaluation has RoleMRC's finer split."""
    lines: list[str] = []
    if "judge" in table:
        lines += _judge_lines(table["judge"], "judge")
    lines += _metric_lines(table["metrics"])
    if "metrics_by_rubric" in table:
        lines += ["", "Finer split (rubrics):", ""]
        if "judge_by_rubric" in table:
            lines += _judge_lines(table["judge_by_rubric"], "judge")
        lines += _metric_lines(table["metrics_by_rubric"])
    return "\n".join(lines)
