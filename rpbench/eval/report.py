"""Evaluation tables (RoleMRC Tables 3 and 9 style), the score chart, logger output; a benchmark adds its own
sections (``Benchmark.report_sections``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

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


def scored_table(
    columns: tuple[str, str],
    rows: Mapping[str, tuple[str, Mapping[str, Mapping[str, Any]], float | None]],
    names: Mapping[str, str],
    digits: int,
) -> tuple[str, str]:
    """A judged benchmark's table: a row per group, ``rows[group] = (its count, summary per part, average)``,
    under ``columns`` (the group's label, the count's); a column per part (``names``: part -> its heading) showing
    mean [95% CI], then the average. Also the judgements left out of the means (unparsed or unanswered), or ''."""
    lines = [
        f"| {columns[0]} | {columns[1]} | " + " | ".join(names.values()) + " | average |",
        "| --- | --- |" + " --- |" * (len(names) + 1),
    ]
    left_out = []
    for group, (count, parts, average) in rows.items():
        cells = []
        for part in names:
            s = parts[part]
            shown = f"{s['mean']:.{digits}f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]" if s["mean"] is not None else "-"
            cells.append(shown)
            if s["parse_failures"] or s["request_failures"]:
                left_out.append(f"{group}/{part}: {s['parse_failures']} unparsed, {s['request_failures']} unanswered")
        cells.append("-" if average is None else f"{average:.{digits}f}")
        lines.append(f"| {group} | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines), ("Judgements left out of the means: " + "; ".join(left_out)) if left_out else ""


CHART_FILE = "score_chart.png"
CHART_WIDTH_INCHES, CHART_BAR_INCHES, CHART_DPI = 8.0, 0.45, 120


def chart_size(bars: int) -> tuple[float, float]:
    """The score chart's size in inches for ``bars`` bars."""
    return CHART_WIDTH_INCHES, CHART_BAR_INCHES * bars + 1.6


def chart_bars(results: Mapping[str, Any], metric: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The score chart's bars (name -> value, ci_low, ci_high, n, on a 0-100 scale) and what they measure:
    judge accuracy (%) per dimension when the judge scored one; else ``metric`` x 100 per dimension (or
    distribution shift); else each overall metric x 100 (bleu_smoothed is 0-100 already)."""

    def bar(summary: Mapping[str, Any], value: str, count: str, metric: str) -> dict[str, Any]:
        scale = 1 if metric in SCALE_100 else 100
        scaled = {k: None if summary.get(k) is None else scale * summary[k] for k in (value, "ci_low", "ci_high")}
        return {"value": scaled[value], "ci_low": scaled["ci_low"], "ci_high": scaled["ci_high"], "n": summary[count]}

    metrics = results["metrics"]
    if "judge" in results:
        bars = {k: bar(v, "accuracy", "judged", "") for k, v in paper_named(results["judge"]["dimensions"]).items()}
        if any(b["value"] is not None for b in bars.values()):
            return bars, "judge accuracy (%)"
    groups = paper_named(metrics["dimension"]) if metrics.get("dimension") else metrics.get("shift") or {}
    bars = {k: bar(v[metric], "mean", "n", metric) for k, v in groups.items() if metric in v}
    if any(b["value"] is not None for b in bars.values()):
        return bars, f"{metric} x 100"
    return {m: bar(s, "mean", "n", m) for m, s in metrics["overall"].items()}, "overall metrics x 100"


def score_chart(bars: Mapping[str, Mapping[str, Any]], what: str, title: str) -> Figure:
    """One horizontal bar per group (its n beside its name) with its 95% CI drawn bound to bound and its value
    written; a group without a value says so instead of showing 0."""
    fig = Figure(figsize=chart_size(len(bars)), layout="constrained")
    ax = fig.subplots()
    ys = range(len(bars))
    for y, b in zip(ys, bars.values()):
        if b["value"] is None:
            ax.text(1, y, "no value", va="center", fontsize=8, color="grey")
            continue
        ax.barh(y, b["value"], color="C0", alpha=0.6)
        end = b["value"]
        if b["ci_low"] is not None:
            ax.plot([b["ci_low"], b["ci_high"]], [y, y], color="black", marker="|", markersize=10)
            end = max(end, b["ci_high"])
        ax.text(end + 1, y, f"{b['value']:.1f}", va="center", fontsize=8)
    ax.set_yticks(list(ys), [f"{name} (n={b['n']})" for name, b in bars.items()], fontsize=9)
    ax.invert_yaxis()  # the first group on top
    ax.set_xlim(0, 110)
    ax.set_xlabel(f"{what}, with its 95% CI")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


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


def sections(
    results: Mapping[str, Any], chart_metric: str, out_dir: Path, run_name: str, own: Sequence[str]
) -> list[str]:
    """The report's markdown sections; ``own``: the benchmark's sections of its own results (after the score
    chart, ``CHART_FILE``, of ``chart_metric`` when no judge scored the dimensions)."""
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
            f"**Note:** {backbone['note']}."
            if backbone["fell_back"]
            else f"BERTScore backbone: `{backbone['backbone']}` layer {backbone['layer']}."
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
            + parse_failure_note(judge)
            + judge_table(paper_named(judge["dimensions"]), "dimension (paper's five)")
            + "\n\n"
            + judge_table({"overall": judge["overall"]}, "all")
            + "\n\nFiner split:\n\n"
            + judge_table(judge["rubrics"], "rubric")
        )
    bars, what = chart_bars(results, chart_metric)
    if bars:
        title = f"{run_name}: {what}, {results['n_records']} test records"
        score_chart(bars, what, title).savefig(out_dir / CHART_FILE, dpi=CHART_DPI)
        out.append(f"![{what} per group with its 95% CI]({CHART_FILE})")
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
