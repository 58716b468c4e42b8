"""Stage 4: generate for the test records, score them (reference metrics, judge), summarise.

What differs per benchmark (groupings, judge protocol, files read instead of generating) is the
``Benchmark`` registered under ``evaluator.name`` (``rpbench.eval.benchmarks``).

``evaluate(ctx)`` (an ``EvalContext``: typed settings, model, records, run folder) writes into
``ctx.out_dir``: predictions.jsonl (resumable), scores.jsonl (per record: metric values and judge
verdicts), judgements.jsonl (judge replies), score_chart.png, and for MMRole the official answers/reviews/results
layout. It returns the machine-readable results plus ``report_sections`` (markdown) for report.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rpbench.core.distributed import rank_and_world
from rpbench.data.records import EvalExample
from rpbench.eval import report
from rpbench.eval.benchmarks import BENCHMARKS, Benchmark
from rpbench.eval.benchmarks.base import read_jsonl, write_jsonl
from rpbench.eval.benchmarks.judge_agreement import agreement_section, human_agreement_of_run
from rpbench.eval.context import EvalContext
from rpbench.eval.generate import endpoint_fingerprint, generate_predictions, generate_via_endpoint, local_fingerprint
from rpbench.eval.settings import EvaluatorSettings, JudgedSettings
from rpbench.eval.stats import aggregate, paired_bootstrap
from rpbench.models.vllm_engine import VLLMEngine
from rpbench.scoring.chat.client import EndpointSettings, Usage
from rpbench.scoring.chat.health import rests_on_nothing
from rpbench.scoring.metrics import ROUGE_TYPES, compute_metrics, corpus_bleu, load_bertscorer
from rpbench.scoring.wordnet import WordNetMissingError, load_wordnet

log = logging.getLogger(__name__)


def generation_fingerprint(ctx: EvalContext) -> dict[str, Any]:
    """What ``generate`` resumes a file under for ``ctx`` (``rpbench.eval.provenance``)."""
    ev = ctx.settings
    if ev.backend == "endpoint":
        return endpoint_fingerprint(ev.endpoint, ev.generation)
    return local_fingerprint(ctx.model_identity, ev.backend, ev.generation)


def generate(ctx: EvalContext, examples: Sequence[EvalExample], path: Path, what: str | None = None) -> dict[str, Any]:
    """Predictions for ``examples`` into ``path`` (resumable) by the evaluator's backend; the generation report.
    ``what``: what the progress bar says is generated (None: the benchmark's replies)."""
    ev = ctx.settings
    what = what or f"{ev.name} replies"
    if ev.backend == "endpoint":
        report = generate_via_endpoint(ev.endpoint, examples, path, ev.generation, image_root=ctx.image_root, what=what)
        return report.as_dict()
    if ctx.model is None:
        raise ValueError(f"evaluator.backend={ev.backend} needs a model")
    rank, world = rank_and_world()
    engine = None
    if ev.backend == "vllm":
        if world > 1:
            raise ValueError("evaluator.backend=vllm runs in one process: evaluate with trainer.devices=1")
        utilization = ev.vllm.gpu_memory_utilization
        engine = VLLMEngine(ctx.model, ctx.tokenizer, gpu_memory_utilization=utilization, what="evaluator.backend=vllm")
    try:
        report = generate_predictions(
            ctx.model,
            ctx.tokenizer,
            examples,
            path,
            ev.generation,
            rank=rank,
            world_size=world,
            engine=engine,
            identity=ctx.model_identity,
            what=what,
        )
    finally:
        if engine is not None:
            engine.close()
    return report.as_dict()


def unavailable_metrics(names: Sequence[str]) -> dict[str, str]:
    """Metrics that cannot be computed on this machine, with the reason (METEOR without WordNet)."""
    if "meteor" not in names:
        return {}
    try:
        load_wordnet()
    except WordNetMissingError as error:
        log.warning("METEOR is reported as missing: %s", error)
        return {"meteor": str(error)}
    return {}


def reference_metrics(
    ev: EvaluatorSettings, benchmark: Benchmark, examples: Sequence[EvalExample], predictions: Mapping[str, str]
) -> dict:
    missing = unavailable_metrics(list(ev.metrics))
    names = [n for n in ev.metrics if n not in missing]
    preds = [predictions[e.id] for e in examples]
    refs = [e.reference for e in examples]
    options = {name: opts for name, opts in ev.metric_options().items() if name in names}
    per_sample = compute_metrics(preds, refs, names, options)
    result = {
        "per_sample": per_sample,
        "summary": aggregate(per_sample, benchmark.groupings(examples), **ev.bootstrap.as_kwargs()),
    }
    if {"bleu", "bleu_smoothed"} & set(names):
        result["corpus_bleu"] = corpus_bleu(preds, refs)  # sacrebleu's, 0-100; not a number the paper reports
    if "bertscore" in options:
        scorer_options = dict(options["bertscore"])
        result["bertscore_backbone"] = load_bertscorer(scorer_options.pop("model"), **scorer_options).describe()
    if missing:
        result["missing_metrics"] = missing
    conventions = metric_conventions(names, options, per_sample)
    if conventions:
        result["metric_conventions"] = conventions
    return result


def metric_conventions(
    names: Sequence[str], options: Mapping[str, Mapping[str, Any]], per_sample: Mapping[str, Sequence[Any]]
) -> dict[str, Any]:
    """How BLEU treats samples without tokens (and how many it left out), ROUGE's tokenizer and ROUGE-Lsum's
    argument order, as configured (``evaluator.bleu.empty``, ``evaluator.rouge.tokenizer``,
    ``evaluator.rougeLsum.order``)."""
    found: dict[str, Any] = {}
    if "bleu" in names and "bleu" in options:
        found["bleu_empty"] = {
            "policy": options["bleu"]["empty"],
            "samples_without_value": sum(v is None for v in per_sample["bleu"]),
        }
    rouge_options = [options[n] for n in names if n in ROUGE_TYPES and n in options]
    if rouge_options:
        found["rouge_tokenizer"] = rouge_options[0]["tokenizer"]
    if "rougeLsum" in names and "rougeLsum" in options:
        found["rougeLsum_order"] = options["rougeLsum"]["order"]
    return found


def compare(ev: EvaluatorSettings, scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Paired bootstrap of every metric and judge rubric against another run on the shared records
    (judge verdicts: only pairs both runs could judge)."""
    other_dir = Path(ev.compare_to)
    other = {row["id"]: row for row in read_jsonl(other_dir / "scores.jsonl")}
    shared = [row for row in scores if row["id"] in other]
    bootstrap = ev.bootstrap.as_kwargs()
    result: dict[str, Any] = {"run": other_dir.name, "shared_records": len(shared)}
    for metric in scores[0]["metrics"] if scores else []:
        result[metric] = paired_bootstrap(
            [other[r["id"]]["metrics"][metric] for r in shared], [r["metrics"][metric] for r in shared], **bootstrap
        )
    rubrics = dict.fromkeys(rubric for row in shared for rubric in row.get("verdicts", {}))
    for rubric in rubrics:
        pairs = [(other[r["id"]].get("verdicts", {}).get(rubric), r["verdicts"].get(rubric)) for r in shared]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if pairs:
            result[f"judge/{rubric}"] = paired_bootstrap([a for a, _ in pairs], [b for _, b in pairs], **bootstrap)
    return result


def judge_estimate(
    settings: JudgedSettings, config: EndpointSettings, benchmark: Benchmark, examples: Sequence[EvalExample]
) -> dict[str, Any]:
    """The judge's estimated cost of judging ``examples`` (``rpbench.scoring.judge.budget``); past
    ``judge.budget`` a JudgeBudgetError. The pipeline asks before it trains or generates anything."""
    from rpbench.scoring.judge.budget import CHARS_PER_TOKEN, check_budget, estimate

    reply_chars = CHARS_PER_TOKEN * settings.generation.max_new_tokens
    texts = [sum(len(t.content) for t in e.prompt) + len(e.reference) + reply_chars for e in examples]
    counts = benchmark.judge_requests(settings, examples)
    found = estimate(
        list(zip(counts, texts, strict=True)),
        settings.judge_max_tokens,
        config.price_input_per_1m,
        config.price_output_per_1m,
    )
    check_budget(found, config.budget)
    # every reply unreadable: each re-askable request asked parse_tries times in all
    reasks = sum(benchmark.reaskable_requests(settings, examples)) * (config.parse_tries - 1)
    log.info(
        "judge estimate: %d requests, and up to %d re-asks of unreadable replies (judge.parse_tries=%d), "
        "%d tokens, %.4f USD",
        *(found.requests, reasks, config.parse_tries, found.tokens, found.cost_usd),
    )
    return {**found.as_dict(), "reasks": reasks, "requests_with_reasks": found.requests + reasks}


def evaluate(ctx: EvalContext) -> dict[str, Any]:
    """``evaluate_benchmark``, with the judge's requests, tokens and cost of the run (``judge_cost``), each
    endpoint role's requests and failures (``endpoints``, warned about above their thresholds), and why the
    results rest on nothing (``failed``: every request of a role failed, no verdict, or a headline without a
    number; the pipeline then fails the run)."""
    from rpbench.scoring.chat.client import counting_usage
    from rpbench.scoring.chat.health import no_verdict, parse_failure_warning

    with counting_usage() as usage:
        results = evaluate_benchmark(ctx)
    if ctx.judge is not None:
        results["judge_cost"] = usage.total().as_dict()
    results["endpoints"] = endpoint_health(ctx, usage, results.get("endpoints", {}))
    benchmark = BENCHMARKS.get(ctx.settings.name)
    unscored = [f"its headline ({h.label}) has no value" for h in benchmark.headlines if h.unscored(results)]
    reasons = [results.get("failed"), rests_on_nothing(results["endpoints"]), *unscored]
    tally = benchmark.judge_tally(results) if ctx.judge is not None else None
    if tally is not None:
        results["judge_tally"] = asdict(tally)
        limit = ctx.judge.warn_parse_failure_rate
        results["judge_warning"] = parse_failure_warning(tally.parse_failures, tally.n, limit)
        reasons.append(no_verdict(tally.n, tally.parse_failures, tally.request_failures))
    if any(reasons):
        results["failed"] = "; ".join(dict.fromkeys(r for r in reasons if r)) + ": the results rest on nothing"
    return results


def endpoint_health(ctx: EvalContext, usage: Usage, counted: Mapping[str, Any]) -> dict[str, Any]:
    """Per endpoint role that asked anything: its ``role_health``. ``counted``: the roles a benchmark counted
    itself (the user simulator's unusable replies, empty ones included); the others from the clients'
    counters: for the judge (and a simulator on its settings) a failed request or an empty reply, against
    ``judge.warn_request_failure_rate``; for generation a failed request (an empty reply is an empty prediction)."""
    from rpbench.scoring.chat.health import GENERATION_FAILURE_LIMIT, role_health

    roles = dict(counted)
    for role, stats in usage.roles.items():
        if role in roles or not stats.asked:
            continue
        if role == "generation":
            roles[role] = role_health(role, stats.asked, stats.failures, GENERATION_FAILURE_LIMIT, None)
        else:  # the judge's, or a user simulator on the judge's settings
            limit, unusable = ctx.judge.warn_request_failure_rate, stats.failures + stats.empty_replies
            roles[role] = role_health(role, stats.asked, unusable, limit, "judge.warn_request_failure_rate")
    return roles


def evaluate_benchmark(ctx: EvalContext) -> dict[str, Any]:
    """The evaluation of ``ctx.settings.name``'s benchmark, written into ``ctx.out_dir``; its results."""
    ev = ctx.settings
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    benchmark = BENCHMARKS.get(ev.name)
    judging = ctx.judge is not None
    from_files = benchmark.from_files(ctx)
    if from_files is not None:
        return from_files
    own = benchmark.evaluate_model(ctx)
    if own is not None:  # its judge's agreement with people, from the verdicts it wrote to scores.jsonl
        if ctx.judge is not None and ctx.settings.human_ratings:
            own["judge_agreement"] = human_agreement_of_run(ev, ctx.judge, read_jsonl(ctx.out_dir / "scores.jsonl"))
            own["report_sections"] = [*own["report_sections"], agreement_section(own["judge_agreement"])]
        return own

    prepared = benchmark.prepare_judge(ctx) if judging else None  # a bad prompt file fails before generating
    examples, changed = benchmark.prepare_examples(ctx)
    generation = generate(ctx, examples, ctx.out_dir / "predictions.jsonl")
    generation["path"] = str(Path(generation["path"]).relative_to(ctx.out_dir))  # files named in the run folder
    results: dict[str, Any] = {
        "n_records": len(examples),
        **changed,
        "generation": generation,
    }
    if rank_and_world()[0] != 0:
        return results
    generated = {row["id"]: row["prediction"] for row in read_jsonl(ctx.out_dir / "predictions.jsonl")}
    predictions, changed_predictions = benchmark.scored_predictions(generated)
    results.update(changed_predictions)
    scored = reference_metrics(ev, benchmark, examples, predictions)
    per_sample = scored.pop("per_sample")
    results["metrics"] = scored.pop("summary")
    results.update(scored)
    scores = [
        {"id": e.id, "task": e.task, "metrics": {m: v[i] for m, v in per_sample.items()}}
        for i, e in enumerate(examples)
    ]
    if judging:
        judged = benchmark.judge(replace(ctx, examples=examples), predictions, prepared)
        results.update(judged.results)
        for row in scores:
            if row["id"] in judged.verdicts:
                row["verdicts"] = judged.verdicts[row["id"]]
        if ev.human_ratings:
            results["judge_agreement"] = human_agreement_of_run(ev, ctx.judge, scores)
    results.update(benchmark.analyze(replace(ctx, examples=examples), predictions, results))
    write_jsonl(ctx.out_dir / "scores.jsonl", scores)
    if ev.compare_to:
        results["compare"] = compare(ev, scores)
    sections = benchmark.report_sections(results)
    if "judge_agreement" in results:
        sections.append(agreement_section(results["judge_agreement"]))
    results["report_sections"] = report.sections(results, str(ev.radar_metric), ctx.out_dir, ctx.run_name, sections)
    report.log_to(ctx.logger, results, examples, predictions, scores)
    return results
