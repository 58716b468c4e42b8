"""MMRole: reference metrics per scenario and per test set; judged by MMRole-Eval (eight metrics, each a
score pair of the evaluated answer against the ground truth) in the official answers/reviews/results layout.

Test records from several test sets (``meta["test_set"]``, MMRole's In-Test and Out-Test: see
``data.files.test``) are written, judged and reported per set: answers/<set>/, reviews/<set>/,
results/<set>/, and the report's table in the paper's Table 5 layout (a row per set, then all records).

``evaluator.reviews=<dir>`` aggregates existing reviews and ``evaluator.answers=<dir>`` judges existing
answers, both without generating; either may be a mapping of test set to folder (``{in: <dir>, out: <dir>}``).
``evaluator.without_vision=true`` is the paper's Table 6 ablation: the model is given no image (the judge
still sees it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.data.mmrole.prompts import METRICS as REVIEW_METRICS
from rpbench.data.mmrole.prompts import review_prompts
from rpbench.data.prepare import TEST_SET
from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, Judged, JudgeTally, rouge_l
from rpbench.eval.context import EvalContext
from rpbench.eval.report import metric_table
from rpbench.eval.settings import JudgedSettings

# How the report names the test sets of conf/data/mmrole.yaml (others by their own name).
SET_LABELS = {"in": "In-Test", "out": "Out-Test"}
Folders = Path | dict[str, Path]


@dataclass(frozen=True, kw_only=True)
class MMRoleSettings(JudgedSettings):
    reviews: str | Mapping[str, str] | None  # existing reviews: a folder, or test set -> folder (null: none)
    answers: str | Mapping[str, str] | None  # existing answers to judge, likewise
    swap: bool
    without_vision: bool


class MMRole(Benchmark):
    headlines = (
        Headline(
            "MMRole-Eval overall", ("mmrole_eval", "all"), "overall", needs="reviews (evaluator.reviews) or a judge"
        ),
        rouge_l(),
    )
    judged = True
    settings_class = MMRoleSettings

    def needs_records(self, settings: MMRoleSettings) -> bool:
        """No test records when existing reviews are aggregated or existing answers judged."""
        return not (settings.reviews or settings.answers)

    def shows_images(self, settings: MMRoleSettings) -> bool:
        """Not in the without-vision ablation (paper Table 6)."""
        return not settings.without_vision

    def needs_judge(self, settings: MMRoleSettings) -> bool:
        """Aggregating existing reviews asks no judge."""
        return not settings.reviews

    def judge_requests(self, settings: MMRoleSettings, examples: Sequence[EvalExample]) -> list[int]:
        return [len(REVIEW_METRICS)] * len(examples)  # one review per MMRole-Eval metric

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        groupings = super().groupings(examples)
        if any(TEST_SET in e.meta for e in examples):
            groupings[TEST_SET] = [e.meta[TEST_SET] for e in examples]
        return groupings

    def prepare_examples(self, ctx: EvalContext) -> tuple[list[EvalExample], dict[str, Any]]:
        """Without vision (paper Table 6): every image taken out of the prompts, the records counted."""
        if not ctx.settings.without_vision:
            return list(ctx.examples), {}
        removed = sum(any(turn.image for turn in e.prompt) for e in ctx.examples)
        blind = [replace(e, prompt=tuple(replace(turn, image=None) for turn in e.prompt)) for e in ctx.examples]
        return blind, {"without_vision": {"records_with_images_removed": removed}}

    def from_files(self, ctx: EvalContext) -> dict[str, Any] | None:
        ev = ctx.settings
        if not (ev.reviews or ev.answers):
            return None
        results = {"mmrole_eval": mmrole_eval(ctx, _folders(ev.answers) if ev.answers else None)}
        if not ev.reviews:  # judged now: with these prompts
            results["prompts"] = review_prompts(ctx.prompts_source).records()
        results["report_sections"] = mmrole_sections(results["mmrole_eval"])
        return results

    def judge(self, ctx: EvalContext, predictions: Mapping[str, str], prepared: Any) -> Judged:
        """MMRole-Eval's score pairs of the answers, written in the official layout (no per-record verdicts:
        a review scores a whole answers file's record on eight metrics, kept in reviews/)."""
        answers = write_answers(ctx.examples, predictions, ctx.out_dir)
        results = {"mmrole_eval": mmrole_eval(ctx, answers), "prompts": review_prompts(ctx.prompts_source).records()}
        return Judged(results, {})

    def analyze(self, ctx: EvalContext, predictions: Mapping[str, str], results: Mapping[str, Any]) -> dict[str, Any]:
        """Not judged (judge=none): the answers still go to answers/ in the official layout, to judge later."""
        if ctx.judge is not None:
            return {}
        written = write_answers(ctx.examples, predictions, ctx.out_dir)
        folders = written.values() if isinstance(written, dict) else [written]
        return {"mmrole_answers": [str(path.relative_to(ctx.out_dir)) for path in folders]}

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        sections = []
        if "without_vision" in results:
            sections.append(
                "**Without vision** (MMRole Table 6 ablation): the model was given no image; images were taken "
                f"out of {results['without_vision']['records_with_images_removed']} test records."
            )
        if TEST_SET in results.get("metrics", {}):
            sections.append(reference_by_test_set(results["metrics"]))
        if "mmrole_answers" in results:
            sections.append(
                "## MMRole-Eval\n\nNot judged (judge=none): reference metrics only. The answers are in "
                + ", ".join(f"`{name}/`" for name in results["mmrole_answers"])
                + " (MMRole's official layout); judge them with `python run.py objective=none evaluator=mmrole "
                "evaluator.answers=<this run>/answers judge=<backend>` (with test sets: "
                "`evaluator.answers={in: <this run>/answers/in, out: <this run>/answers/out}`)."
            )
        return sections + (mmrole_sections(results["mmrole_eval"]) if "mmrole_eval" in results else [])

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        """Every (review, metric) score pair of all answers files."""
        if "mmrole_eval" not in results:
            return None
        pooled = results["mmrole_eval"]["all"]
        parse, request = (sum(pooled[k].values()) for k in ("parse_failures", "request_failures"))
        return JudgeTally(sum(pooled["n"].values()) + parse + request, parse, request)


def reference_by_test_set(metrics: Mapping[str, Any]) -> str:
    """The reference metrics with a row per test set and one for all records (Table 5 layout)."""
    rows = {SET_LABELS.get(name, name): summary for name, summary in metrics[TEST_SET].items()}
    return "### Reference metrics per test set\n\n" + metric_table({**rows, "overall": metrics["overall"]}, "test set")


def write_answers(examples: Sequence[EvalExample], predictions: Mapping[str, str], out_dir: Path) -> Folders:
    """The run's answers in MMRole's official answers layout (one <scenario>_test.json per scenario); with
    test sets, one folder per set (``answers/<set>``, returned by set name)."""
    if any(TEST_SET in e.meta for e in examples):
        sets: dict[str, list[EvalExample]] = {}
        for e in examples:
            sets.setdefault(str(e.meta[TEST_SET]), []).append(e)
        return {name: _write_answer_files(part, predictions, out_dir / "answers" / name) for name, part in sets.items()}
    return _write_answer_files(examples, predictions, out_dir / "answers")


def _write_answer_files(examples: Sequence[EvalExample], predictions: Mapping[str, str], answers: Path) -> Path:
    answers.mkdir(parents=True, exist_ok=True)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for e in examples:
        user = e.prompt[-1].content
        system = e.prompt[0].content if e.prompt[0].role == "system" else ""
        by_file.setdefault(f"{e.task}_test.json", []).append(
            {
                "id": e.id,
                "system": system,
                "image": e.meta.get("image"),
                "role": e.meta.get("role"),
                "script": e.meta.get("script"),
                "other_role": e.meta.get("other_role"),
                "conversations": [
                    {"from": "user", "value": user},
                    {"from": "assistant", "value": e.reference, "answer": predictions[e.id]},
                ],
            }
        )
    for name, records in by_file.items():
        (answers / name).write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
    return answers


def _folders(value: str | Mapping[str, str]) -> Folders:
    """A folder, or a mapping of test set to folder (``evaluator.reviews`` / ``evaluator.answers``)."""
    return Path(value) if isinstance(value, str) else {name: Path(folder) for name, folder in value.items()}


def mmrole_eval(ctx: EvalContext, answers: Folders | None) -> dict[str, Any]:
    """Aggregate ``evaluator.reviews``, or judge ``answers`` into reviews/; official CSVs in results/ (one
    folder per test set when there are several)."""
    from rpbench.eval.benchmarks.mmrole.judging import (
        aggregate_review_sets,
        aggregate_reviews,
        judge_answer_sets,
        judge_answers,
        write_results_csvs,
    )

    ev, out_dir = ctx.settings, ctx.out_dir
    if ev.reviews:
        reviews = _folders(ev.reviews)
        results = aggregate_review_sets(reviews) if isinstance(reviews, dict) else aggregate_reviews(reviews)
    else:
        judge = judge_answer_sets if isinstance(answers, dict) else judge_answers
        with ctx.open_client() as client:
            results = judge(
                answers,
                client,
                out_dir / "reviews",
                ev.judge_max_tokens,
                prompts=review_prompts(ctx.prompts_source),
                swap=ev.swap,
                image_root=ctx.image_root,
            )
    csvs = write_results_csvs(results, out_dir / "results")
    results["csv_files"] = [p.relative_to(out_dir / "results").as_posix() for p in csvs]
    return results


def mmrole_sections(results: Mapping[str, Any]) -> list[str]:
    """MMRole-Eval's scores (MMRole Table 5 layout: with test sets a row per set and one over all records,
    then a row per answers file) and its unscored judgements."""
    metrics = results["metrics"]
    header = ["| {} | n | " + " | ".join(metrics) + " | overall |", "| --- | --- |" + " --- |" * (len(metrics) + 1)]
    lines = ["## MMRole-Eval (score = evaluated / ground truth)", ""]
    if "test_sets" in results:
        sets = results["test_sets"]
        lines += [header[0].format("test set"), header[1]]
        lines += [_score_row(SET_LABELS.get(name, name), part["all"], metrics) for name, part in sets.items()]
        lines += [_score_row("overall", results["all"], metrics), ""]
        files = {f"{name}/{stem}": entry for name, part in sets.items() for stem, entry in part["files"].items()}
    else:
        files = results["files"]
    lines += [header[0].format("file"), header[1]] + [_score_row(name, e, metrics) for name, e in files.items()]
    failures = sum(sum(e["parse_failures"].values()) + sum(e["request_failures"].values()) for e in files.values())
    lines += ["", f"Unscored judgements (parse or request failures, not counted as 0): {failures}"]
    return ["\n".join(lines)]


def _score_row(name: str, entry: Mapping[str, Any], metrics: Sequence[str]) -> str:
    cells = [entry["means"][m] for m in metrics] + [entry["overall"]]
    return f"| {name} | {entry['count']} | " + " | ".join("–" if v is None else f"{v:.4f}" for v in cells) + " |"


BENCHMARKS.register("mmrole")(MMRole())
