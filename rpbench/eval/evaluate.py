"""Stage 4: generate for the test records, score them (reference metrics, judge), summarise.

``evaluate(cfg, model, tokenizer, examples, out_dir)`` writes into ``out_dir``: predictions.jsonl
(resumable), scores.jsonl (per record: metric values and judge verdicts), judgements.jsonl (judge
replies), radar.png, and for MMRole the official answers/reviews/results layout. It returns the
machine-readable results plus ``report_sections`` (markdown) for report.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.data.files import image_root
from rpbench.data.records import EvalExample
from rpbench.distributed import rank_and_world
from rpbench.eval import report
from rpbench.eval.generate import generate_predictions, generate_via_endpoint
from rpbench.eval.metrics import compute_metrics, corpus_bleu, load_bertscorer
from rpbench.eval.stats import aggregate, paired_bootstrap, summarize

JUDGED = {"rolemrc", "mmrole"}


def _container(node) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _drop_images(examples: Sequence[EvalExample], policy: str) -> tuple[list[EvalExample], int]:
    """Text-only generation: ``policy`` error keeps the records (generation then refuses them), drop
    removes their images (counted in the results)."""
    if policy != "drop":
        return list(examples), 0
    dropped = sum(any(t.image for t in e.prompt) for e in examples)
    return [replace(e, prompt=tuple(replace(t, image=None) for t in e.prompt)) for e in examples], dropped


def generate(cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], path: Path) -> dict[str, Any]:
    ev = cfg.evaluator
    options = _container(ev.generation)
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
            api_key_env=str(endpoint.api_key_env),
            timeout_s=float(endpoint.timeout_s),
            image_root=image_root(cfg.data),
        ).as_dict()
    if ev.backend != "local":
        raise ValueError(f"evaluator.backend={ev.backend!r}: choose local or endpoint")
    if model is None:
        raise ValueError("evaluator.backend=local needs a model")
    rank, world = rank_and_world()
    options.setdefault("max_prompt_length", int(cfg.data.max_prompt_length))
    return generate_predictions(model, tokenizer, examples, path, options, rank=rank, world_size=world).as_dict()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def groupings(name: str, examples: Sequence[EvalExample]) -> dict[str, list]:
    """How results are broken down per benchmark (a record may sit in several dimensions).

    RoleMRC: ``dimension`` is the paper's five (Knowledge Boundary, Role Style, Multi-turn, Nested,
    Prioritized), ``rubric`` the finer split a record is judged on (``meta["dimensions"]``).
    """
    from rpbench.eval.judge.rolemrc_rubrics import dimensions_of

    groups: dict[str, list] = {"task": [e.task for e in examples]}
    if name == "rolemrc":
        rubrics = [list(e.meta.get("dimensions", [])) for e in examples]
        groups["dimension"] = [dimensions_of(r) for r in rubrics]
        groups["rubric"] = rubrics
    if name == "rpgbench":
        groups["shift"] = [e.meta["shift"] for e in examples]
    return groups


def reference_metrics(cfg: DictConfig, examples: Sequence[EvalExample], predictions: Mapping[str, str]) -> dict:
    ev = cfg.evaluator
    names = list(ev.metrics)
    preds = [predictions[e.id] for e in examples]
    refs = [e.reference for e in examples]
    options = {name: _container(ev[name]) for name in names if ev.get(name) is not None}
    per_sample = compute_metrics(preds, refs, names, options)
    result = {
        "per_sample": per_sample,
        "summary": aggregate(per_sample, groupings(str(ev.name), examples), **_container(ev.bootstrap)),
    }
    if {"bleu", "bleu_smoothed"} & set(names):
        result["corpus_bleu"] = corpus_bleu(preds, refs)  # sacrebleu's, 0-100; not a number the paper reports
    if "bertscore" in options:
        scorer_options = dict(options["bertscore"])
        result["bertscore_backbone"] = load_bertscorer(scorer_options.pop("model"), **scorer_options).describe()
    return result


def judge_prompts(cfg: DictConfig):
    """rpbench's reference-free rubrics, or the templates of ``evaluator.judge_prompt_file`` (checked)."""
    from rpbench.eval.judge.rolemrc_rubrics import DEFAULT_PROMPTS, load_prompts

    path = cfg.evaluator.judge_prompt_file
    return DEFAULT_PROMPTS if path is None else load_prompts(str(path))


def judge_rolemrc_records(
    cfg: DictConfig, examples: Sequence[EvalExample], predictions: Mapping[str, str], out_dir: Path, prompts
) -> tuple[dict[str, Any], dict[str, dict[str, int | None]]]:
    """The judge's accuracies per rubric, per dimension (the paper's five) and overall, with bootstrap
    CIs, and each record's verdicts by rubric; the judge's replies go to judgements.jsonl."""
    from rpbench.eval.judge import judge_rolemrc
    from rpbench.eval.judge.rolemrc_rubrics import dimension_of

    judged = judge_rolemrc(examples, predictions, _container(cfg.judge), prompts)
    records = judged.pop("records")
    write_jsonl(out_dir / "judgements.jsonl", records)
    bootstrap = _container(cfg.evaluator.bootstrap)
    for level, key in (("rubrics", lambda r: r), ("dimensions", dimension_of)):
        for group, tally in judged[level].items():
            verdicts = [v for rec in records for r, v in rec["verdicts"].items() if key(r) == group]
            tally.update({k: summarize(verdicts, **bootstrap)[k] for k in ("ci_low", "ci_high")})
    return judged, {rec["id"]: rec["verdicts"] for rec in records}


def write_mmrole_answers(examples: Sequence[EvalExample], predictions: Mapping[str, str], out_dir: Path) -> Path:
    """The run's answers in MMRole's official answers layout (one <scenario>_test.json per scenario)."""
    answers = out_dir / "answers"
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


def mmrole_eval(cfg: DictConfig, out_dir: Path, answers: Path | None) -> dict[str, Any]:
    """Aggregate ``evaluator.reviews``, or judge ``answers`` into reviews/; official CSVs in results/."""
    from rpbench.eval.mmrole_eval import aggregate_reviews, judge_answers, write_results_csvs

    ev = cfg.evaluator
    if ev.get("reviews"):
        results = aggregate_reviews(Path(str(ev.reviews)))
    else:
        from rpbench.eval.judge import open_judge

        with open_judge(_container(cfg.judge)) as client:
            results = judge_answers(
                answers,
                client,
                out_dir / "reviews",
                swap=bool(ev.swap),
                image_root=image_root(cfg.data),
            )
    results["csv_files"] = [p.name for p in write_results_csvs(results, out_dir / "results")]
    return results


def compare(cfg: DictConfig, scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Paired bootstrap of every metric and judge rubric against another run on the shared records
    (judge verdicts: only pairs both runs could judge)."""
    other_dir = Path(str(cfg.evaluator.compare_to))
    if not (other_dir / "scores.jsonl").is_file():
        raise FileNotFoundError(f"evaluator.compare_to={cfg.evaluator.compare_to}: no scores.jsonl in it")
    other = {row["id"]: row for row in read_jsonl(other_dir / "scores.jsonl")}
    shared = [row for row in scores if row["id"] in other]
    bootstrap = _container(cfg.evaluator.bootstrap)
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


def evaluate(
    cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], out_dir: Path, logger=None
) -> dict[str, Any]:
    ev = cfg.evaluator
    name = str(ev.name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    judging = str(cfg.judge.get("backend", "none")) != "none"
    if judging and name not in JUDGED:
        raise ValueError(f"evaluator={name} has no judge protocol: use judge=none (judges: {sorted(JUDGED)})")
    if name == "mmrole" and (ev.get("reviews") or ev.get("answers")):
        results = {"mmrole_eval": mmrole_eval(cfg, out_dir, Path(str(ev.answers)) if ev.get("answers") else None)}
        results["report_sections"] = report.mmrole_sections(results["mmrole_eval"])
        return results

    prompts = judge_prompts(cfg) if judging and name == "rolemrc" else None  # a bad prompt file fails before generating
    examples, images_dropped = _drop_images(examples, str(ev.get("images", "error")))
    results: dict[str, Any] = {
        "n_records": len(examples),
        "images_dropped": images_dropped,
        "generation": generate(cfg, model, tokenizer, examples, out_dir / "predictions.jsonl"),
    }
    if rank_and_world()[0] != 0:
        return results
    predictions = {row["id"]: row["prediction"] for row in read_jsonl(out_dir / "predictions.jsonl")}
    scored = reference_metrics(cfg, examples, predictions)
    per_sample = scored.pop("per_sample")
    results["metrics"] = scored.pop("summary")
    results.update(scored)
    scores = [
        {"id": e.id, "task": e.task, "metrics": {m: v[i] for m, v in per_sample.items()}}
        for i, e in enumerate(examples)
    ]
    if judging and name == "rolemrc":
        results["judge"], verdicts = judge_rolemrc_records(cfg, examples, predictions, out_dir, prompts)
        for row in scores:
            row["verdicts"] = verdicts[row["id"]]
    if judging and name == "mmrole":
        results["mmrole_eval"] = mmrole_eval(cfg, out_dir, write_mmrole_answers(examples, predictions, out_dir))
    write_jsonl(out_dir / "scores.jsonl", scores)
    if ev.get("compare_to"):
        results["compare"] = compare(cfg, scores)
    results["report_sections"] = report.sections(results, str(ev.get("radar_metric", "rougeL")), out_dir)
    report.log_to(logger, results, examples, predictions, scores)
    return results
