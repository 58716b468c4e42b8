"""Stage 5: report.md, a short human summary of metrics.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rpbench.eval.benchmarks import BENCHMARKS


def _data_lines(data: dict[str, Any]) -> list[str]:
    if not data:
        return ["No records read (nothing in this run needed them)."]
    lines = ["| split | read | skipped |", "| --- | --- | --- |"]
    for split, summary in data.items():
        if isinstance(summary, dict) and "read" in summary:
            lines.append(f"| {split} | {summary['read']} | {summary['skipped']} |")
    counted = [
        f"{split} {key}: {value}"
        for split, summary in data.items()
        if isinstance(summary, dict)
        for key, value in summary.items()
        if isinstance(value, int) and key not in ("read", "skipped")
    ]
    if counted:  # what the readers counted besides (MMRole: system prompts filled, records per test set)
        lines.append("\nCounted while reading: " + ", ".join(counted))
    if "train_test_overlap" in data:
        lines.append(f"\nTraining records also in the test split: {data['train_test_overlap']}")
    if "augment_test_overlap" in data:
        lines.append(f"Augmentation records also in the test split: {data['augment_test_overlap']}")
    return lines


def _train_lines(train: dict[str, Any]) -> list[str]:
    samples = train["samples"]
    lines = [
        f"Trained on {samples['train']} samples ({samples['val']} held out) for "
        f"{train['optimizer_steps']} optimizer steps."
    ]
    cut = {kind: samples[kind] for kind in ("truncated", "cut_unevenly", "history_dropped") if kind in samples}
    if any(any(per_split.values()) for per_split in cut.values()):
        lines.append(
            "Cut to data.max_length: "
            + ", ".join(
                f"{kind} {per_split['train']} train, {per_split['val']} held-out" for kind, per_split in cut.items()
            )
            + "."
        )
    skipped = samples["no_supervised_tokens"]
    if skipped["train"] or skipped["val"]:
        lines.append(
            f"Not trained (no supervised token left after truncation): {skipped['train']} train, "
            f"{skipped['val']} held-out."
        )
    held_out = train.get("held_out")
    if held_out:
        counts = ("step", "tokens", "pairs", "completions")  # counts, not measures
        names = [k for k in held_out["after"] if k not in counts]
        lines += ["", "| held-out | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
        for phase in ("before", "after"):
            values = [held_out[phase].get(name) for name in names]
            lines.append(f"| {phase} training | " + " | ".join("–" if v is None else f"{v:.4f}" for v in values) + " |")
    return lines


def headline(results: dict[str, Any]) -> list[str]:
    """The results the console shows at the end of a run (the rest is in report.md)."""
    lines = []
    held_out = results.get("train", {}).get("held_out")
    if held_out and "loss" in held_out["after"]:
        lines.append(f"held-out loss {held_out['before']['loss']:.4f} -> {held_out['after']['loss']:.4f}")
    overall = results.get("eval", {}).get("metrics", {}).get("overall", {})
    scored = [f"{m} {s['mean']:.4f}" for m, s in overall.items() if s["mean"] is not None]
    if scored:
        lines.append("test: " + ", ".join(scored))
    evaluator = results["evaluator"]
    if evaluator == "none":
        lines.append("headline: none (evaluator=none: no benchmark ran)")
    elif "eval" in results:
        benchmark = BENCHMARKS.get(evaluator)
        first = benchmark.headline_line(results["eval"])
        if results.get("failed"):  # a number a failed evaluation holds (unparsed verdicts counted wrong)
            first = "none (the evaluation failed)"  # is not its headline
        lines.append(f"headline ({evaluator}): {first}")
        lines += benchmark.summary_lines(results["eval"])
    tally = results.get("eval", {}).get("judge_tally")
    if tally:
        lines.append(
            f"judge: {tally['n']} judgements, {tally['parse_failures']} unparsed, "
            f"{tally['request_failures']} unanswered"
        )
    judge = results.get("eval", {}).get("judge", {}).get("overall")
    if judge and judge["accuracy"] is not None:
        score = f"{100 * judge['accuracy']:.2f}%" if judge["judged"] else "none"  # no verdict: no number
        lines.append(
            f"judge accuracy {score} ({judge['judged']} of {judge['n']} judged; "
            f"{judge['parse_failures']} unparsed, {judge['request_failures']} unanswered)"
        )
    humans = results.get("eval", {}).get("judge_agreement")
    if humans and humans["n_compared"]:
        stats = ", ".join(
            f"{k} {v:.4f}"
            for k, v in (("Spearman", humans["spearman"]), ("accuracy", humans["accuracy"]))
            if v is not None
        )
        lines.append(f"judge vs humans on {humans['n_compared']} items: {stats or 'undefined (constant ratings)'}")
    cost = results.get("eval", {}).get("judge_cost")
    if cost and "requests" in cost:
        tokens = cost["prompt_tokens"] + cost["completion_tokens"]
        lines.append(f"judge cost: {cost['requests']} requests, {tokens} tokens, {cost['cost_usd']:.4f} USD")
    return lines


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    header = (
        f"model `{results['model']}`, data `{results['data']}`, objective `{results['objective']}`, "
        f"evaluator `{results['evaluator']}`, probe `{results.get('probe', {}).get('name', 'none')}`"
    )
    lines = [f"# {results['run_name']}", "", header]
    if results.get("failed"):
        lines += ["", f"**Failed:** {results['failed']}. This run has no headline."]
    lines += [f"\n**Warning:** {warning}" for warning in results.get("warnings", [])]
    lines += ["", "## Data", "", *_data_lines(results.get("records", {}))]
    if "train" in results:
        lines += ["", "## Training", "", *_train_lines(results["train"])]
    for stage in ("eval", "probe"):
        for section in results.get(stage, {}).get("report_sections", []):
            lines += ["", section]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
