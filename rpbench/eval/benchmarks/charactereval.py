"""CharacterEval (Tu et al. 2024; github.com/morecry/CharacterEval): Chinese role-play dialogues scored by its
reward model, CharacterRM, on twelve subjective metrics in three dimensions.

``data=charactereval`` reads the dialogues (``rpbench.data.charactereval``). The model writes the character's
next line (predictions.jsonl, resumable); as the authors' transform_format.py, the reply is cut to its first
line (``evaluator.first_line_only``). CharacterRM (``evaluator.reward_model``: a local folder,
``rpbench.scoring.character_rm``) scores each reply on each metric id2metric assigns to its record, 1-5
(rm_scores.jsonl, resumed under the same reward model and settings). Results under the paper's names: each
metric's mean with a bootstrap CI (the authors' compute_score.py: the plain mean of a metric's scores), each
dimension's average (the mean of its metric means, Table 4's "Avg.") and an overall average (rpbench's: the
mean of the three dimension averages; the paper reports none). A scoring failure is counted and left out of
the means, never scored; a metric without a score leaves its dimension and the overall without a value.
The paper's fourth dimension, Personality Back-Testing (MBTI accuracy), needs MBTI questionnaires and labels
the repository does not publish: not computed (results say so).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rpbench.core.distributed import rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.data.charactereval import BY_KEY, DIMENSIONS, METRICS
from rpbench.data.charactereval_prompts import reward_model_input
from rpbench.data.records import EvalExample
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, read_jsonl, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import EvaluatorSettings
from rpbench.eval.stats import summarize
from rpbench.scoring.character_rm import CharacterRMSettings
from rpbench.scoring.chat.client import EndpointSettings

log = logging.getLogger(__name__)
NOT_COMPUTED = {
    "Personality Back-Testing": "MBTI accuracy needs the MBTI questionnaires and the characters' MBTI labels, "
    "which the CharacterEval repository does not publish"
}


@dataclass(frozen=True, kw_only=True)
class CharacterEvalSettings(EvaluatorSettings):
    reward_model: CharacterRMSettings
    first_line_only: bool  # score a reply's first line (the authors' transform_format.py)

    needs_metrics = False  # scored by the reward model alone


def scored_reply(text: str, first_line_only: bool) -> str:
    return text.split("\n")[0] if first_line_only else text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def score_replies(
    rm_settings: CharacterRMSettings,
    examples: Sequence[EvalExample],
    replies: Mapping[str, str],
    path: Any,
) -> list[dict[str, Any]]:
    """One row per (record, assigned metric): its score or error. Rows already in ``path`` for the same reply
    (and, through ``claim``, the same reward model and settings) are kept; the others are scored and appended."""
    from rpbench.eval.provenance import claim
    from rpbench.scoring.character_rm import CharacterRM

    claim(path, rm_settings.fingerprint())
    done = {(r["id"], r["metric"], r["reply_sha256"]): r for r in (read_jsonl(path) if path.exists() else [])}
    jobs = [(e, BY_KEY[key]) for e in examples for key in e.meta["metrics"]]
    wanted = [(e, m, digest(replies[e.id])) for e, m in jobs]
    todo = [(e, m, d) for e, m, d in wanted if (e.id, m.key, d) not in done]
    if todo:
        rm = CharacterRM(rm_settings)
        with path.open("a", encoding="utf-8") as out:
            for e, m, d in todo:
                text = reward_model_input(e.meta["profile"], e.meta["context"], replies[e.id], m.chinese)
                scored = rm.score(text)
                row = {
                    "id": e.id,
                    "metric": m.key,
                    "reply_sha256": d,
                    "score": scored.score,
                    "error": scored.error,
                    "tokens": scored.tokens,
                    "truncated": scored.truncated,
                }
                done[(e.id, m.key, d)] = row
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                out.flush()
    return [done[(e.id, m.key, d)] for e, m, d in wanted]


def aggregate(rows: Sequence[Mapping[str, Any]], bootstrap: Mapping[str, Any]) -> dict[str, Any]:
    """Per metric (paper's names): the mean with its bootstrap CI and the failures left out; per dimension:
    the mean of its metric means; overall: the mean of the dimension averages (None where any part has none)."""
    metrics: dict[str, Any] = {}
    for metric in METRICS:
        mine = [r for r in rows if r["metric"] == metric.key]
        summary = summarize([r["score"] for r in mine if r["error"] is None], **bootstrap)
        summary["scoring_failures"] = sum(r["error"] is not None for r in mine)
        summary["truncated_inputs"] = sum(bool(r["truncated"]) for r in mine)
        summary["dimension"] = metric.dimension
        metrics[metric.name] = summary
    dimensions = {}
    for dimension in DIMENSIONS:
        means = [metrics[m.name]["mean"] for m in METRICS if m.dimension == dimension]
        dimensions[dimension] = {"mean": None if None in means else sum(means) / len(means)}
    averages = [d["mean"] for d in dimensions.values()]
    overall = {"mean": None if None in averages else sum(averages) / len(averages)}
    return {"metrics": metrics, "dimensions": dimensions, "overall": overall, "not_computed": dict(NOT_COMPUTED)}


class CharacterEval(Benchmark):
    headlines = (Headline("CharacterEval overall (CharacterRM, 1-5)", ("charactereval", "overall")),)
    settings_class = CharacterEvalSettings

    def problems(self, settings: Settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        if data.format != "charactereval":
            return [f"evaluator=charactereval reads data=charactereval (format charactereval), got {data.format}"]
        return []

    def evaluate_model(self, ctx: EvalContext) -> dict[str, Any]:
        from rpbench.eval.evaluate import generate  # the generic evaluation imports the benchmarks

        if rank_and_world()[1] > 1:
            raise ConfigError("evaluator=charactereval runs in one process: evaluate with trainer.devices=1")
        ev: CharacterEvalSettings = ctx.settings
        examples = list(ctx.examples)
        path = ctx.out_dir / "predictions.jsonl"
        results: dict[str, Any] = {"n_records": len(examples), "generation": generate(ctx, examples, path)}
        generated = {row["id"]: row["prediction"] for row in read_jsonl(path)}
        replies = {e.id: scored_reply(generated[e.id], ev.first_line_only) for e in examples}
        rows = score_replies(ev.reward_model, examples, replies, ctx.out_dir / "rm_scores.jsonl")
        table = aggregate(rows, ev.bootstrap.as_kwargs())
        failures = sum(m["scoring_failures"] for m in table["metrics"].values())
        if rows and failures == len(rows):
            first = next(r["error"] for r in rows if r["error"])
            raise RuntimeError(
                f"CharacterRM scored none of the {len(rows)} (reply, metric) pairs; first error: {first}"
            )
        if failures:
            log.warning(
                "CharacterRM failed on %d of %d (reply, metric) pairs: left out of the means", failures, len(rows)
            )
        table["scoring_failures"] = failures
        table["n_scored"] = len(rows) - failures
        table["empty_replies"] = sum(not replies[e.id].strip() for e in examples)
        results["charactereval"] = table
        results["reply_scored_as"] = "first line" if ev.first_line_only else "whole reply"
        results["reward_model"] = ev.reward_model.fingerprint()
        write_jsonl(
            ctx.out_dir / "scores.jsonl",
            [
                {
                    "id": e.id,
                    "task": e.task,
                    "metrics": {},
                    "verdicts": {r["metric"]: r["score"] for r in rows if r["id"] == e.id},
                }
                for e in examples
            ],
        )
        results["metrics"] = {"overall": {name: s for name, s in table["metrics"].items() if s["n"]}}
        results["report_sections"] = report_sections(results)
        if ctx.logger is not None:
            logged = {f"eval/charactereval/{k}": v["mean"] for k, v in table["metrics"].items()}
            logged.update({f"eval/charactereval/{k}": v["mean"] for k, v in table["dimensions"].items()})
            logged["eval/charactereval/overall"] = table["overall"]["mean"]
            ctx.logger.log_metrics({k: v for k, v in logged.items() if v is not None})
        return results


def shown_mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report_sections(results: Mapping[str, Any]) -> list[str]:
    table = results["charactereval"]
    lines = [
        "## CharacterEval (CharacterRM scores, 1-5)",
        "",
        f"Replies scored as: {results['reply_scored_as']}. Mean [95% bootstrap CI]; a dimension's average is the "
        "mean of its metric means (the paper's Avg.); overall is rpbench's mean of the three averages.",
        "",
        "| dimension | metric | n | mean [CI] | scoring failures |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, s in table["metrics"].items():
        shown = "-" if s["mean"] is None else f"{s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}]"
        lines.append(f"| {s['dimension']} | {name} | {s['n']} | {shown} | {s['scoring_failures']} |")
    for name, d in table["dimensions"].items():
        lines.append(f"| {name} | Avg. | | {shown_mean(d['mean'])} | |")
    overall = shown_mean(table["overall"]["mean"])
    lines.append(f"| overall | | | {overall} | {table['scoring_failures']} |")
    lines += ["", "Not computed: " + "; ".join(f"{k} ({v})" for k, v in table["not_computed"].items())]
    return ["\n".join(lines)]


BENCHMARKS.register("charactereval")(CharacterEval())
