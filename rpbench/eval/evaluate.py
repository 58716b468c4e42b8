"""Stage 4: generate for the test records, score them (reference metrics, judge), summarise.

What differs per benchmark (groupings, judge protocol, files read instead of generating) is the
``Benchmark`` registered under ``evaluator.name`` (``rpbench.eval.benchmarks``).

``evaluate(cfg, model, tokenizer, examples, out_dir)`` writes into ``out_dir``: predictions.jsonl
(resumable), scores.jsonl (per record: metric values and judge verdicts), judgements.jsonl (judge
replies), radar.png, and for MMRole the official answers/reviews/results layout. It returns the
machine-readable results plus ``report_sections`` (markdown) for report.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rpbench.data.files import image_root
from rpbench.data.records import EvalExample
from rpbench.distributed import rank_and_world
from rpbench.eval import report
from rpbench.eval.benchmarks import BENCHMARKS, Benchmark, judged_benchmarks
from rpbench.eval.benchmarks.base import as_container, read_jsonl, write_jsonl
from rpbench.eval.benchmarks.judge_agreement import agreement_section, human_agreement_of_run
from rpbench.eval.generate import generate_predictions, generate_via_endpoint
from rpbench.eval.stats import aggregate, paired_bootstrap
from rpbench.models.vllm_engine import VLLMEngine
from rpbench.scoring.metrics import compute_metrics, corpus_bleu, load_bertscorer
from rpbench.scoring.wordnet import WordNetMissingError, load_wordnet

log = logging.getLogger(__name__)


def generate(cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], path: Path) -> dict[str, Any]:
    ev = cfg.evaluator
    options = as_container(ev.generation)
    if ev.backend == "endpoint":
        endpoint = ev.endpoint
        if not endpoint.base_url or not endpoint.model:
            raise ValueError("evaluator.backend=endpoint needs evaluator.endpoint.base_url and .model")
        return generate_via_endpoint(
            str(endpoint.base_url),
            str(endpoint.model),
            examples,
            path,
            options,
            concurrency=int(endpoint.concurrency),
            api_key_env=endpoint.api_key_env,
            timeout_s=float(endpoint.timeout_s),
            image_root=image_root(cfg.data),
        ).as_dict()
    if ev.backend not in ("local", "vllm"):
        raise ValueError(f"evaluator.backend={ev.backend!r}: choose local, vllm or endpoint")
    if model is None:
        raise ValueError(f"evaluator.backend={ev.backend} needs a model")
    rank, world = rank_and_world()
    options.setdefault("max_prompt_length", int(cfg.data.max_prompt_length))
    engine = None
    if ev.backend == "vllm":
        if world > 1:
            raise ValueError("evaluator.backend=vllm runs in one process: evaluate with trainer.devices=1")
        what = "evaluator.backend=vllm"
        engine = VLLMEngine(model, tokenizer, gpu_memory_utilization=float(ev.vllm.gpu_memory_utilization), what=what)
    try:
        report = generate_predictions(
            model, tokenizer, examples, path, options, rank=rank, world_size=world, engine=engine
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
    cfg: DictConfig, benchmark: Benchmark, examples: Sequence[EvalExample], predictions: Mapping[str, str]
) -> dict:
    ev = cfg.evaluator
    missing = unavailable_metrics(list(ev.metrics))
    names = [n for n in ev.metrics if n not in missing]
    preds = [predictions[e.id] for e in examples]
    refs = [e.reference for e in examples]
    options = {name: as_container(ev[name]) for name in names if ev.get(name) is not None}
    per_sample = compute_metrics(preds, refs, names, options)
    result = {
        "per_sample": per_sample,
        "summary": aggregate(per_sample, benchmark.groupings(examples), **as_container(ev.bootstrap)),
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
    """How BLEU treats samples without tokens (and how many it left out) and ROUGE-Lsum's argument order,
    as configured (``evaluator.bleu.empty``, ``evaluator.rougeLsum.order``)."""
    found: dict[str, Any] = {}
    if "bleu" in names and "bleu" in options:
        found["bleu_empty"] = {
            "policy": options["bleu"]["empty"],
            "samples_without_value": sum(v is None for v in per_sample["bleu"]),
        }
    if "rougeLsum" in names and "rougeLsum" in options:
        found["rougeLsum_order"] = options["rougeLsum"]["order"]
    return found


def compare(cfg: DictConfig, scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Paired bootstrap of every metric and judge rubric against another run on the shared records
    (judge verdicts: only pairs both runs could judge)."""
    other_dir = Path(str(cfg.evaluator.compare_to))
    if not (other_dir / "scores.jsonl").is_file():
        raise FileNotFoundError(f"evaluator.compare_to={cfg.evaluator.compare_to}: no scores.jsonl in it")
    other = {row["id"]: row for row in read_jsonl(other_dir / "scores.jsonl")}
    shared = [row for row in scores if row["id"] in other]
    bootstrap = as_container(cfg.evaluator.bootstrap)
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


def judge_estimate(cfg: DictConfig, benchmark: Benchmark, examples: Sequence[EvalExample]) -> dict[str, Any]:
    """The judge's estimated cost of judging ``examples`` (``rpbench.scoring.judge.budget``); past
    ``judge.budget`` a JudgeBudgetError. The pipeline asks before it trains or generates anything."""
    from rpbench.scoring.judge import JudgeConfig
    from rpbench.scoring.judge.budget import CHARS_PER_TOKEN, check_budget, estimate

    judge = JudgeConfig.from_mapping(as_container(cfg.judge))
    reply_chars = CHARS_PER_TOKEN * int(cfg.evaluator.generation.max_new_tokens)
    texts = [sum(len(t.content) for t in e.prompt) + len(e.reference) + reply_chars for e in examples]
    counts = benchmark.judge_requests(cfg, examples)
    found = estimate(
        list(zip(counts, texts, strict=True)),
        # a plugin's benchmark without a judge.max_tokens entry of its own: the longest reply of any
        judge.max_tokens.get(str(cfg.evaluator.name), max(judge.max_tokens.values())),
        judge.price_input_per_1m,
        judge.price_output_per_1m,
    )
    check_budget(found, judge.budget)
    log.info("judge estimate: %d requests, %d tokens, %.4f USD", found.requests, found.tokens, found.cost_usd)
    return found.as_dict()


def evaluate(
    cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], out_dir: Path, logger=None
) -> dict[str, Any]:
    """``evaluate_benchmark``, with the judge's requests, tokens and cost of the run (``judge_cost``)."""
    from rpbench.scoring.judge.client import counting_usage

    with counting_usage() as usage:
        results = evaluate_benchmark(cfg, model, tokenizer, examples, out_dir, logger)
    if str(cfg.judge.backend) != "none":
        results["judge_cost"] = usage.as_dict()
    return results


def evaluate_benchmark(
    cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], out_dir: Path, logger=None
) -> dict[str, Any]:
    ev = cfg.evaluator
    name = str(ev.name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    judging = str(cfg.judge.backend) != "none"
    benchmark = BENCHMARKS.get(name)
    if judging and not benchmark.judged:
        raise ValueError(f"evaluator={name} has no judge protocol: use judge=none (judges: {judged_benchmarks()})")
    from_files = benchmark.from_files(cfg, out_dir)
    if from_files is not None:
        return from_files
    own = benchmark.evaluate_model(cfg, model, tokenizer, examples, out_dir, logger)
    if own is not None:
        return own

    prepared = benchmark.prepare_judge(cfg) if judging else None  # a bad prompt file fails before generating
    examples, changed = benchmark.prepare_examples(cfg, examples)
    generation = generate(cfg, model, tokenizer, examples, out_dir / "predictions.jsonl")
    generation["path"] = str(Path(generation["path"]).relative_to(out_dir))  # results name files in the run folder
    results: dict[str, Any] = {
        "n_records": len(examples),
        **changed,
        "generation": generation,
    }
    if rank_and_world()[0] != 0:
        return results
    generated = {row["id"]: row["prediction"] for row in read_jsonl(out_dir / "predictions.jsonl")}
    predictions, changed_predictions = benchmark.scored_predictions(generated)
    results.update(changed_predictions)
    scored = reference_metrics(cfg, benchmark, examples, predictions)
    per_sample = scored.pop("per_sample")
    results["metrics"] = scored.pop("summary")
    results.update(scored)
    scores = [
        {"id": e.id, "task": e.task, "metrics": {m: v[i] for m, v in per_sample.items()}}
        for i, e in enumerate(examples)
    ]
    if judging:
        benchmark.judge(cfg, examples, predictions, out_dir, prepared, results, scores)
        if ev.get("human_ratings"):
            results["judge_agreement"] = human_agreement_of_run(cfg, scores)
    benchmark.analyze(cfg, model, tokenizer, examples, predictions, out_dir, results)
    write_jsonl(out_dir / "scores.jsonl", scores)
    if ev.get("compare_to"):
        results["compare"] = compare(cfg, scores)
    sections = benchmark.report_sections(results)
    if "judge_agreement" in results:
        sections.append(agreement_section(results["judge_agreement"]))
    results["report_sections"] = report.sections(results, str(ev.radar_metric), out_dir, sections)
    report.log_to(logger, results, examples, predictions, scores)
    return results
