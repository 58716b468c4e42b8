"""Evaluation tables (RoleMRC Tables 3 and 9 style), radar chart, logger output; a benchmark adds its own
sections (``Benchmark.report_sections``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.scoring.format import SCALE_100, fmt_metric, fmt_percent
from rpbench.scoring.judge.rolemrc_rubrics import DIMENSIONS, in_paper_order


def _cell(summary: Mapping[str, Any], metric: str, with_ci: bool) -> str:
    text = f"{fmt_metric(summary['mean'], metric)} ± {fmt_metric(summary['std'], metric)}"
    if with_ci and summary.get("ci_low") is not None:
        text += f" [{fmt_metric(summary['ci_low'], metric)}, {fmt_metric(summary['ci_high'], metric)}]"
    return text


def paper_named(groups: Mapping[str, Any]) -> dict[str, Any]:
    """Groups keyed by dimension, in the paper's order and with its names (Knowledge Boundary, ...)."""
    return {DIMENSIONS.get(k, k): v for k, v in in_paper_order(groups).items()}


def metric_table(groups: Mapping[str, Mapping[str, Mapping[str, Any]]], title: str, with_ci: bool = False) -> str:
    metrics = list(next(iter(groups.values())))
    lines = [f"| {title} | n | " + " | ".join(metrics) + " |", "| --- | --- |" + " --- |" * len(metrics)]
    for group, summaries in groups.items():
        n = next(iter(summaries.values()))["n"]
        lines.append(f"| {group} | {n} | " + " | ".join(_cell(summaries[m], m, with_ci) for m in metrics) + " |")
    return "\n".join(lines)


def judge_table(groups: Mapping[str, Mapping[str, Any]], title: str) -> str:
    lines = [
        f"| {title} | accuracy [95% CI] | judged / n | parse failures | request failures |",
        "| --- | --- | --- | --- | --- |",
    ]
    for group, tally in groups.items():
        ci = (
            f" [{fmt_percent(tally.get('ci_low'))}, {fmt_percent(tally.get('ci_high'))}]"
            if tally.get("ci_low") is not None
            else ""
        )
        lines.append(
            f"| {group} | {fmt_percent(tally['accuracy'])}{ci} | {tally['judged']} / {tally['n']} | "
            f"{tally['parse_failures']} | {tally['request_failures']} |"
        )
    return "\n".join(lines)


RADAR_SIZE_INCHES, RADAR_DPI = (6.0, 6.0), 120  # a 720 x 720 pixel image


def radar_chart(values: Mapping[str, float], title: str, path: Path) -> Path | None:
    """One polygon over the spokes (at least three are needed for a radar); ``values`` on a 0-100 scale."""
    values = {k: v for k, v in values.items() if v is not None}
    if len(values) < 3:
        return None
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [textwrap.fill(name, 14) for name in values]
    angles = [2 * math.pi * i / len(names) for i in range(len(names))]
    closed = [*values.values(), next(iter(values.values()))]
    fig, ax = plt.subplots(figsize=RADAR_SIZE_INCHES, subplot_kw={"polar": True})
    ax.plot([*angles, angles[0]], closed, marker="o")
    ax.fill([*angles, angles[0]], closed, alpha=0.2)
    ax.set_xticks(angles, names, fontsize=9)
    ax.tick_params(axis="x", pad=14)  # spoke names clear of the circle
    ax.set_ylim(0, 100)
    ax.set_yticks([20, 40, 60, 80, 100], ["20", "40", "60", "80", "100"], fontsize=7, color="grey")
    ax.set_rlabel_position(180 / len(names))  # between the first two spokes, away from their names
    ax.set_title(title, fontsize=10, pad=20)
    fig.tight_layout()
    fig.savefig(path, dpi=RADAR_DPI)
    plt.close(fig)
    return path


def radar_values(results: Mapping[str, Any], radar_metric: str) -> tuple[dict[str, float], str]:
    """The radar's spokes on a 0-100 scale and its title: judge accuracy (%) per dimension; else
    ``radar_metric`` x 100 per dimension (or distribution shift); with fewer than three of those, each
    overall metric x 100 (bleu_smoothed is 0-100 already)."""

    def x100(value: float | None, metric: str) -> float | None:
        return None if value is None else value if metric in SCALE_100 else 100 * value

    metrics = results["metrics"]
    if "judge" in results:
        spokes = {k: x100(v["accuracy"], "") for k, v in paper_named(results["judge"]["dimensions"]).items()}
        if sum(v is not None for v in spokes.values()) >= 3:
            return spokes, "judge accuracy (%)"
    groups = paper_named(metrics["dimension"]) if metrics.get("dimension") else metrics.get("shift") or {}
    spokes = {k: x100(v[radar_metric]["mean"], radar_metric) for k, v in groups.items() if radar_metric in v}
    if sum(v is not None for v in spokes.values()) >= 3:
        return spokes, f"{radar_metric} x 100"
    return {m: x100(s["mean"], m) for m, s in metrics["overall"].items()}, "overall metrics x 100"


def image_note(images: Mapping[str, int]) -> str:
    """What the model saw of the prompts' images (``GenerationReport.images``); nothing for text prompts."""
    if not any(images.values()):
        return ""
    note = f"; images shown to the model {images['used']}"
    return note + (
        f" (left out with dropped history turns {images['history_dropped']})" if images["history_dropped"] else ""
    )


def parse_failure_note(judge: Mapping[str, Any]) -> str:
    """How unreadable verdicts count (``judge.parse_failure``), as a sentence before the judge tables."""
    if judge["parse_failure"] == "wrong":
        how = "count as wrong (0) in the accuracy, as the released llm_judge.py"
    else:
        how = "are left out of the accuracy (judge.parse_failure=exclude; the release counts them as wrong)"
    return f"Unreadable verdicts ({judge['overall']['parse_failures']}) {how}.\n\n"


def conventions_note(conventions: Mapping[str, Any]) -> str:
    """BLEU's treatment of empty texts and ROUGE-Lsum's argument order, in words."""
    notes = []
    if "bleu_empty" in conventions:
        empty = conventions["bleu_empty"]
        what = (
            "left out of the BLEU mean (the released evaluation's NaN)"
            if empty["policy"] == "drop"
            else "scored BLEU 0 (evaluator.bleu.empty=zero; the release leaves them out)"
        )
        notes.append(f"{empty['samples_without_value']} samples with an empty prediction or reference {what}")
    if "rougeLsum_order" in conventions:
        order = conventions["rougeLsum_order"]
        notes.append(
            "ROUGE-Lsum with the response as rouge-score's first argument, as the released evaluation"
            if order == "response_first"
            else "ROUGE-Lsum with the reference as rouge-score's first argument (the release puts the response first)"
        )
    return "; ".join(notes) + "."


def sections(results: Mapping[str, Any], radar_metric: str, out_dir: Path, own: Sequence[str]) -> list[str]:
    """The report's markdown sections; ``own``: the benchmark's sections of its own results (after the radar)."""
    metrics = results["metrics"]
    generation = results["generation"]
    out = [
        "## Evaluation\n\n"
        f"{results['n_records']} test records; generated now {generation['n_generated']}, resumed "
        f"{generation['n_resumed']}"
        + image_note(generation.get("images") or {})
        + ". Metrics 0-1 as RoleMRC reports them (bleu_smoothed 0-100), judge accuracy in %; "
        "mean ± std [95% bootstrap CI]."
    ]
    out.append(metric_table({"overall": metrics["overall"]}, "overall", with_ci=True))
    if "missing_metrics" in results:
        out.append("\n".join(f"Not computed: {m} ({reason})" for m, reason in results["missing_metrics"].items()))
    if "metric_conventions" in results:
        out.append(conventions_note(results["metric_conventions"]))
    if "bertscore_backbone" in results:
        backbone = results["bertscore_backbone"]
        out.append(
            f"BERTScore backbone: `{backbone['backbone']}` layer {backbone['layer']}"
            + (f" (fallback: {backbone['fallback_reason']})" if backbone["fell_back"] else "")
        )
    if metrics.get("dimension"):
        out.append(metric_table(paper_named(metrics["dimension"]), "dimension (paper's five)"))
    for grouping in ("rubric", "shift", "task"):
        if metrics.get(grouping):
            out.append(metric_table(metrics[grouping], grouping))
    if "judge" in results:
        judge = results["judge"]
        out.append(
            f"### Judge `{judge['judge_model']}` (prompt {judge['prompt_version']})\n\n"
            + (f"**Warning:** {judge['warning']}\n\n" if judge.get("warning") else "")
            + parse_failure_note(judge)
            + judge_table(paper_named(judge["dimensions"]), "dimension (paper's five)")
            + "\n\n"
            + judge_table({"overall": judge["overall"]}, "all")
            + "\n\nFiner split:\n\n"
            + judge_table(judge["rubrics"], "rubric")
        )
    chart = radar_chart(*radar_values(results, radar_metric), out_dir / "radar.png")
    if chart is not None:
        out.append(f"![radar]({chart.name})")
    out += own
    if "compare" in results:
        cmp = results["compare"]
        rows = [
            f"| {m} | {fmt_metric(v['delta'], m)} | [{fmt_metric(v['ci_low'], m)}, {fmt_metric(v['ci_high'], m)}] | "
            f"{'–' if v['p_value'] is None else format(v['p_value'], '.4f')} | {v['n']} |"
            for m, v in cmp.items()
            if isinstance(v, dict)
        ]
        out.append(
            f"### Paired bootstrap against `{cmp['run']}` ({cmp['shared_records']} shared records)\n\n"
            "| metric | delta (this - other) | 95% CI | p | n |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows)
        )
    return out


def log_to(
    logger,
    results: Mapping[str, Any],
    examples: Sequence,
    predictions: Mapping[str, str],
    scores: Sequence[Mapping[str, Any]],
) -> None:
    """Overall numbers to any Lightning logger; the per-record table to W&B."""
    if logger is None:
        return
    flat = {f"eval/{m}": s["mean"] for m, s in results["metrics"]["overall"].items() if s["mean"] is not None}
    if "judge" in results:
        flat.update(
            {
                f"eval/judge/{d}": t["accuracy"]
                for d, t in results["judge"]["dimensions"].items()
                if t["accuracy"] is not None
            }
        )
    logger.log_metrics(flat)
    if hasattr(logger, "log_table"):
        columns = ["id", "task", "prompt", "prediction", "reference", "metrics", "verdicts"]
        rows = [
            [
                e.id,
                e.task,
                e.prompt[-1].content,
                predictions[e.id],
                e.reference,
                str(s["metrics"]),
                str(s.get("verdicts", {})),
            ]
            for e, s in zip(examples, scores)
        ]
        logger.log_table(key="eval/predictions", columns=columns, data=rows)
