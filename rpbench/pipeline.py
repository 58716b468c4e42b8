"""The run, in one direction: build -> data -> train -> evaluate -> report (see shared design)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError, DataFormatError, RpbenchError
from rpbench.core.heap import frozen_heap
from rpbench.core.stopwatch import Stopwatch
from rpbench.data.files import run_label
from rpbench.data.hygiene import check_overlap
from rpbench.data.prepare import check_augment_ids, read_split, train_val_split
from rpbench.data.records import drop_images, image_count, missing_image
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks import BENCHMARKS
from rpbench.eval.context import EvalContext
from rpbench.eval.evaluate import evaluate, judge_estimate
from rpbench.export.hub import push_to_hub
from rpbench.export.model_card import write_model_card
from rpbench.loggers import build_logger, finish_logger
from rpbench.models import DeferredModel, family_of, for_inference, load_model, load_tokenizer
from rpbench.models.settings import ModelSettings
from rpbench.objectives.registry import objective_class
from rpbench.probes.stage import PROBES, ProbeContext, run_probe
from rpbench.run_report import headline, write_report
from rpbench.scoring.chat.client import LocalServer, client_opener
from rpbench.serve.running import local_judge
from rpbench.training import (
    TrainingSettings,
    check_resume,
    check_trained_records,
    resolve_ckpt,
    train,
    untuned_start_warning,
    zero_stage,
)
from rpbench.training.trainer_settings import epoch_problems
from rpbench.validate import TrainEvalRun, check_model_source, check_test_images, check_test_records

log = logging.getLogger(__name__)


class RunFailed(RpbenchError, RuntimeError):
    """The evaluation's results rest on nothing (``eval.failed``): metrics.json is written with ``failed`` set
    (the leaderboard skips such a run) and the run exits non-zero."""


def evaluation_needs_records(spec: TrainEvalRun) -> bool:
    """Whether the evaluation reads the test records (not when it only aggregates or judges given files)."""
    ev = spec.evaluator
    return ev is not None and BENCHMARKS.get(ev.name).needs_records(ev)


def evaluates_a_model(spec: TrainEvalRun) -> bool:
    """False for the evaluations that measure or judge files and records alone (judge agreement, shift report,
    a conversation run's stored sessions re-judged)."""
    return spec.evaluator is not None and BENCHMARKS.get(spec.evaluator.name).evaluates_model(spec.evaluator)


def generates_in_process(spec: TrainEvalRun) -> bool:
    """Whether the run's own model generates for the test records (evaluation or a probe)."""
    local_generation = (
        evaluation_needs_records(spec) and evaluates_a_model(spec) and spec.evaluator.backend in ("local", "vllm")
    )
    return local_generation or PROBES.get(spec.probe.name).needs_model


def evaluates_model_itself(spec: TrainEvalRun) -> bool:
    """Whether the evaluator runs the run's own model its own way (evaluator=general's lm-eval tasks)."""
    ev = spec.evaluator
    return evaluates_a_model(spec) and not BENCHMARKS.get(ev.name).reads_records and ev.backend == "local"


def check_epoch(training: TrainingSettings, splits: dict[str, list], train_split: str) -> None:
    """The trainer's batch limits against the records an epoch trains on (``epoch_problems``), once they are read
    and before the model loads: a ConfigError listing what Lightning would refuse after loading."""
    trained, _ = train_val_split(splits[train_split], training.data.val_fraction, training.run.seed)
    records = len(trained) + len(splits.get("augment", []))
    problems = epoch_problems(training.trainer.as_dict(), training.objective, records)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def needs_model(spec: TrainEvalRun) -> bool:
    return spec.objective is not None or generates_in_process(spec) or evaluates_model_itself(spec)


def eval_context(
    spec: TrainEvalRun, model, tokenizer, examples, out_dir: Path, logger, local_judge_server: LocalServer
) -> EvalContext:
    """The evaluation stage's inputs: its typed settings, the judge's, the data and model settings it reads."""
    return EvalContext(
        settings=spec.evaluator,
        judge=spec.judge,
        data=spec.data,
        model_config=spec.model,
        prompts_source=spec.data.prompts_source,
        model=model,
        tokenizer=tokenizer,
        examples=examples,
        out_dir=out_dir,
        run_name=spec.run.run_name,
        local_judge_server=local_judge_server,
        logger=logger,
    )


def build_models(training: TrainingSettings | None, model: ModelSettings) -> dict[str, tuple]:
    """Name -> (model, tokenizer) of each model ``training``'s objective trains (``models_to_build``; the
    first is the one evaluated and probed), or of ``model`` (the run's model) alone when nothing
    trains. Under ZeRO-3 a trained model is a DeferredModel: the objective builds it inside the engine's init
    context, partitioned (the evaluation reloads it from the run's export)."""
    specs = {"policy": model}
    if training is not None:
        specs = objective_class(training.objective.name).models_to_build(training.objective, training.model)
    defer = training is not None and zero_stage(training.trainer.values) == 3
    models = {}
    for name, spec in specs.items():
        tokenizer = load_tokenizer(spec)
        models[name] = (DeferredModel(spec, tokenizer) if defer else load_model(spec, tokenizer), tokenizer)
    return models


def splits_read(spec: TrainEvalRun) -> tuple[str | None, bool]:
    """What a run reads: its training split (None when nothing trains), and whether it reads the test split."""
    train_split = spec.training.split if spec.training is not None else None
    return train_split, evaluation_needs_records(spec) or PROBES.get(spec.probe.name).needs_model


def read_data(data: DataSettings, train_split: str | None, need_test: bool) -> tuple[dict, dict[str, Any]]:
    """Records per split (and ``augment``: the records of ``data.files.augment``, read as the training split),
    and the read report (counts, skipped records, train/test overlap)."""
    splits: dict[str, list] = {}
    report: dict[str, Any] = {}
    # The test split is read for evaluation, and for the train/test overlap check whenever it is configured.
    with_test = need_test or bool(train_split and data.files.get("test"))
    augment = bool(train_split and data.files.get("augment"))
    wanted = [(split, split) for split in (train_split, "test" if with_test else None) if split]
    for split, file in [*wanted, *([(train_split, "augment")] if augment else [])]:
        try:
            result = read_split(data, split, file)
        except FileNotFoundError as error:
            raise ConfigError(f"data.files.{file}: {error}") from error
        splits[file] = result.examples
        configured = str(data.files[file])  # reported as configured: no machine paths in results
        summary = result.summary()
        summary["first_skipped"] = [m.replace(str(summary["path"]), configured) for m in summary["first_skipped"]]
        report[file] = {**summary, "path": configured, "records_sha256": records_sha256(result.examples)}
    if train_split and "test" in splits:
        trained = {"train": train_split, **({"augment": "augment"} if augment else {})}
        for label, file in trained.items():
            report[f"{label}_test_overlap"] = check_overlap(
                splits[file],
                splits["test"],
                allow_overlap=data.allow_overlap,
                train_name=f"data.files.{file}",
                test_name="data.files.test",
            )
    if augment:
        check_augment_ids(splits[train_split], splits["augment"], str(data.files["augment"]))
    return splits, report


def records_sha256(examples: list) -> str:
    """The content hash of the records read (every field, in order): the data's identity across machines."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(json.dumps(dataclasses.asdict(example), sort_keys=True, default=str).encode())
    return digest.hexdigest()


def records_for_model(
    spec: TrainEvalRun, splits: dict[str, list], counts: dict[str, Any], train_split: str | None
) -> None:
    """The records as the model gets them: with ``data.images=drop`` every split's images are removed (counted
    per split as ``images_dropped``); with ``keep`` a text-only model refuses records with images."""
    data = spec.data
    if data.images == "drop":
        for split, examples in splits.items():
            splits[split], counts[split]["images_dropped"] = drop_images(examples)
        return
    for split in splits:
        counts[split]["images_dropped"] = 0
    ev = spec.evaluator
    test_images_seen = evaluation_needs_records(spec) and BENCHMARKS.get(ev.name).shows_images(ev)
    if generates_in_process(spec):
        check_test_images(spec, splits.get("test", []))
    seen = [split for split in splits if split != "test" or test_images_seen]
    for split in seen:
        missing = missing_image(splits[split])
        if missing is not None and (split == "test" or family_of(spec.model).takes_images):
            raise DataFormatError(
                f"data.files.{split}={data.files.get(split)}",
                f"id {missing[0]!r}",
                "image",
                f"image '{missing[1]}' does not exist (data.image_root: {data.image_root}): the model "
                "would see it; put the images there, or set data.images=drop",
            )
    with_image = next((e for split in (train_split, "augment") for e in splits.get(split, []) if image_count(e)), None)
    if with_image is not None and not family_of(spec.model).takes_images:
        raise ConfigError(
            f"data={data.name}: training record {with_image.id!r} has an image, and model={spec.model.name} "
            "is text-only: choose a vision-language model (e.g. model=tiny-qwen2-vl), or data.images=drop to "
            "train on the text alone (the dropped images are counted)"
        )


def is_rank_zero() -> bool:
    return L.fabric.utilities.rank_zero.rank_zero_only.rank == 0


def run(spec: TrainEvalRun, local_judge_server: LocalServer = local_judge) -> dict[str, Any]:
    """The run ``validate`` parsed (every setting checked before anything expensive); its results.
    ``local_judge_server`` starts a ``judge=local`` server (rpbench's own; tests hand in a scripted one)."""
    with frozen_heap():
        return run_stages(spec, local_judge_server)


def run_stages(spec: TrainEvalRun, local_judge_server: LocalServer) -> dict[str, Any]:
    """``run``'s stages, in order: data, model, training, evaluation and probes, report."""
    stopwatch = Stopwatch()
    if needs_model(spec):
        check_model_source(spec)
    out_dir = spec.output_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    objective = spec.objective.name if spec.objective is not None else "none"
    evaluator = spec.evaluator.name if spec.evaluator is not None else "none"
    probe = spec.probe.name
    training = spec.training  # the training stage's one input
    train_split, need_test = splits_read(spec)  # 1. data: read before the model loads
    splits, records = read_data(spec.data, train_split, need_test=need_test)
    warnings = []  # a checkpoint resumes only into the training it was written for: checked before config.yaml
    if training is not None:  # the records trained on are part of it: a file replaced at the same path counts
        trained = {file: records[file]["records_sha256"] for file in (train_split, "augment") if file in records}
        training = training.with_records(trained)
        warnings += check_resume(training, resolve_ckpt(training.run.ckpt_path, out_dir))
        check_epoch(training, splits, train_split)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(dict(spec.composed)))
    results: dict[str, Any] = {
        "run_name": spec.run.run_name,
        "short_run": spec.run.short_run,  # why its numbers are a check, not a result (debug=short, ...); null: full
        "model": f"{spec.model.name} from {run_label(spec.run.init_from)}" if spec.run.init_from else spec.model.name,
        "data": spec.data.name,
        "objective": objective,
        "evaluator": evaluator,
        "rpbench_version": metadata.version("rpbench"),
    }

    for overlap in spec.overlaps:  # parts of the run one model plays twice, allowed at startup
        log.warning(overlap)
        warnings.append(overlap)
    warning = untuned_start_warning(training) if training is not None else None
    if warning:
        log.warning(warning)
        warnings.append(warning)
    if warnings:
        results["warnings"] = warnings

    results["records"] = records
    records_for_model(spec, splits, results["records"], train_split)
    if evaluation_needs_records(spec):
        check_test_records(spec, splits.get("test", []))
    if training is not None:
        check_trained_records(training, [*splits[train_split], *splits.get("augment", [])])
    if evaluator != "none" and spec.judge is not None and evaluation_needs_records(spec):
        benchmark = BENCHMARKS.get(evaluator)
        results["judge_estimate"] = judge_estimate(spec.evaluator, spec.judge, benchmark, splits.get("test", []))

    stopwatch.lap("data")
    L.seed_everything(spec.run.seed, workers=True)
    models = build_models(training, spec.model) if needs_model(spec) else {}  # 2. build
    stopwatch.lap("model")
    model, tokenizer = next(iter(models.values())) if models else (None, None)
    if model is None:
        results["model"] = "not loaded"

    logger = build_logger(spec.logger, out_dir, spec.run.run_name, spec.composed)
    if train_split:  # 3. train
        train_records, val_records = train_val_split(splits[train_split], spec.data.val_fraction, spec.run.seed)
        train_records += splits.get("augment", [])  # after the held-out split: it holds training-file records only
        tokenizers = {name: tok for name, (_, tok) in models.items()}
        trained = {name: m for name, (m, _) in models.items()}
        judges = client_opener(local_judge_server)  # judge rewards (judge=local: served here when a reward opens it)
        results["train"] = train(training, trained, tokenizers, train_records, val_records, out_dir, logger, judges)
        stopwatch.lap("training")
    exported = out_dir / "model" if results.get("train", {}).get("model_dir") else None
    if exported and is_rank_zero():
        write_model_card(training, results, exported)  # again after evaluation, with its metrics

    if model is not None and (evaluator != "none" or probe != "none"):  # 4. evaluate, then probe
        saved = None
        if "train" in results:  # the evaluated model's export (model/, or model/<name>/ for several)
            saved = out_dir / "model" / next(iter(models)) if len(models) > 1 else out_dir / "model"
        model = for_inference(model, tokenizer, spec.model, spec.trainer.values, saved)
    evaluation = eval_context(spec, model, tokenizer, splits.get("test", []), out_dir, logger, local_judge_server)
    if evaluator != "none":
        results["eval"] = evaluate(evaluation)
        eval_warnings = [h["warning"] for h in results["eval"]["endpoints"].values() if h["warning"]]
        eval_warnings += [results["eval"]["judge_warning"]] if results["eval"].get("judge_warning") else []
        eval_warnings += results["eval"].get("warnings", [])  # what the evaluation measured to warn about
        if eval_warnings:
            results["warnings"] = [*results.get("warnings", []), *eval_warnings]
        if results["eval"].get("failed"):
            results["failed"] = f"evaluator={evaluator}: {results['eval']['failed']}"
            if is_rank_zero():
                write_results(results, out_dir, logger)
                for line in headline(results):  # what it did measure, before why it fails
                    log.info(line)
            raise RunFailed(f"{results['failed']} (metrics.json marks the run failed: it has no headline)")
    if probe != "none":
        again = lambda folder: evaluate(replace(evaluation.into(folder), logger=None))  # noqa: E731
        probing = ProbeContext(
            settings=spec.probe,
            model=model,
            tokenizer=tokenizer,
            examples=splits.get("test", []),
            out_dir=out_dir,
            model_config=spec.model,
            max_length=spec.data.max_length,
            max_prompt_length=spec.data.max_prompt_length,
            evaluate=again,
            baseline_eval=results.get("eval"),
        )
        results["probe"] = run_probe(probing)
    stopwatch.lap("evaluation")

    if exported and is_rank_zero():  # 5. export and report
        write_model_card(training, results, exported)
        if spec.export.push_to_hub:
            results["hub_commit"] = push_to_hub(exported, spec.export.hub, spec.run.run_name)
            log.info("model/ uploaded: %s", results["hub_commit"])
    if is_rank_zero():
        write_results(results, out_dir, logger)
        for line in headline(results):
            log.info(line)
        stopwatch.lap("report")
        log.info(stopwatch.line())
        log.info("run written to %s", os.path.relpath(out_dir))
    return results


def write_results(results: dict[str, Any], out_dir: Path, logger: Any) -> None:
    """metrics.json and report.md; the logger finished."""
    (out_dir / "metrics.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    write_report(results, out_dir)
    finish_logger(logger, out_dir)
