"""Checks of a whole run configuration at startup, before a model is loaded or trained.

``validate(cfg)`` raises one ConfigError listing every problem found, each naming the key, its value and
what is allowed (the allowed names come from the registries and config groups that define them).
``check_test_images`` checks the records read against the evaluator, still before training.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.data.records import EvalExample
from rpbench.data.rolemrc import RoleMRCOptions
from rpbench.data.settings import DataSettings, data_settings_problems
from rpbench.data.templates import PromptSettings
from rpbench.eval.benchmarks import BENCHMARKS, judged_benchmarks
from rpbench.export.hub import export_problems
from rpbench.loggers import LOGGERS, LoggerSettings, missing_package
from rpbench.models import family_of
from rpbench.models.checks import generation_length_problems, hub_problems, model_context, source_problems
from rpbench.models.config_tree import model_options
from rpbench.models.generation import GenerationSettings
from rpbench.models.quantization import quantization_problems
from rpbench.models.settings import ModelSettings
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.registry import OBJECTIVES
from rpbench.probes.stage import PROBES
from rpbench.scoring.chat.client import EndpointSettings, backends
from rpbench.scoring.chat.endpoints import api_key
from rpbench.scoring.judge.parties import rewarding_judges, trained_by
from rpbench.serve.settings import ServeRun, ServeSettings
from rpbench.synth.config import SynthSettings
from rpbench.synth.synthesize import SynthesisRun
from rpbench.training.fit import zero_stage
from rpbench.training.settings import ExportSettings, RunSettings, TrainingSettings, training_settings
from rpbench.training.trainer_settings import TrainerSettings, trainer_problems

Problems = list[str]


def _choice(problems: Problems, key: str, value: Any, allowed: Sequence[str]) -> bool:
    if str(value) in allowed:
        return True
    problems.append(f"{key}={value!r}: choose one of {', '.join(allowed)}")
    return False


def import_plugins(modules: list[str]) -> None:
    """Import the user's modules listed in ``plugins``: each registers its formats, metrics, evaluators..."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is None or not (name == error.name or name.startswith(error.name + ".")):
                raise  # the plugin itself imports something missing
            raise ConfigError(f"plugins: cannot import {name!r} ({error}): put it on PYTHONPATH") from error


def check_run(cfg: DictConfig, problems: Problems) -> RunSettings | None:
    """The keys at the top of the run config (name, seed, start, checkpoints); ``init_from`` holds a saved model."""
    keys = {f.name: cfg[f.name] for f in fields(RunSettings) if f.name in cfg}
    run = RunSettings.collect(OmegaConf.to_container(OmegaConf.create(keys), resolve=True), "", problems)
    if run is not None:
        check_init_from(run.init_from, problems)
    return run


def check_init_from(init_from: str | None, problems: Problems) -> None:
    """``init_from``, when set, is a run folder with a saved model; a folder without one says why it has none."""
    if init_from and not (Path(init_from) / "model").is_dir():
        why = why_no_model(Path(init_from))
        problems.append(
            f"init_from={init_from}: expected a run folder with a saved 'model' in it" + (why and f"; {why}")
        )


def why_no_model(folder: Path) -> str:
    """Why the run folder ``folder`` holds no saved model, as far as its own files tell ('' when they do not)."""
    if not folder.is_dir():
        return "no such folder"
    config_file = folder / "config.yaml"
    config = OmegaConf.load(config_file) if config_file.is_file() else OmegaConf.create()
    short = OmegaConf.select(config, "short_run")
    if short:
        return f"it is a short run ({short}), and a short run saves no model: run it again without {short}"
    if OmegaConf.select(config, "save_model") is False:
        return "it ran with save_model=false: run it again without"
    if not (folder / "metrics.json").is_file():
        return "its run did not finish (no metrics.json; its run.log says why)"
    return ""


def check_logger(cfg: DictConfig, problems: Problems) -> LoggerSettings | None:
    """The logger option's typed settings (its registered ``LoggerKind``'s class); its package installed."""
    name = str(cfg.logger.name)
    if not _choice(problems, "logger.name", name, LOGGERS.names()):
        return None
    kind = LOGGERS.get(name)
    missing = missing_package(kind)
    if missing:
        problems.append(f"logger={name}: {missing}")
    values = OmegaConf.to_container(cfg.logger, resolve=True)
    return kind.settings_class.collect(values, "logger", problems)


def check_model(cfg: DictConfig, problems: Problems) -> ModelSettings | None:
    """The model group's settings, pointed at ``init_from``'s saved model when set: a model marked unsupported,
    its quantization and its image settings checked too."""
    model = ModelSettings.collect(OmegaConf.to_container(cfg.model, resolve=True), "model", problems)
    if model is None:
        return None
    if model.unsupported:
        problems.append(f"model={model.name}: {model.unsupported}")
        return None
    problems.extend(quantization_problems(model))
    problems.extend(source_problems(model))
    check_images(cfg, model, problems)
    saved = Path(str(cfg.init_from)) / "model" if cfg.init_from else None
    return replace(model, name_or_path=str(saved)) if saved is not None and saved.is_dir() else model


def check_images(cfg: DictConfig, model: ModelSettings, problems: Problems) -> None:
    """The image settings of the model: ``model.freeze_vision`` (read by families with a vision tower
    only), LoRA (adapts the language model only) and packing (carries no images)."""
    try:
        family = family_of(model)
    except (KeyError, ValueError) as error:
        problems.append(f"model.family: {error}")
        return
    freeze = model.freeze_vision
    if family.vision_module is None:
        if freeze is not None:
            problems.append(f"model.freeze_vision={freeze!r}: model={model.name} has no vision tower; remove the key")
        return
    if freeze is None:
        problems.append("model.freeze_vision=None: expected true (vision tower frozen) or false (trained)")
    elif model.lora is not None and not freeze:
        problems.append(
            "model.freeze_vision=false with model.lora: LoRA adapts the language model only and leaves the "
            "vision tower frozen; set model.freeze_vision=true (or train without LoRA)"
        )
    if family.takes_images and str(cfg.objective.name) != "none" and cfg.objective.get("packing"):
        problems.append(
            f"objective.packing=true: model={model.name} takes images, which packed batches cannot carry; "
            "set objective.packing=false"
        )


def check_objective(cfg: DictConfig, problems: Problems) -> ObjectiveSettings | None:
    """The objective's typed settings (its ``config_class``, which checks its own values), and whether the
    trainer can step its optimizers."""
    name = str(cfg.objective.name)
    if not _choice(problems, "objective.name", name, [*OBJECTIVES.names(), "none"]) or name == "none":
        return None
    count = OBJECTIVES.get(name).optimizer_count
    strategy = cfg.trainer.strategy
    if isinstance(strategy, Mapping) and strategy.get("name") == "deepspeed" and count > 1:
        problems.append(
            f"objective={name} steps {count} optimizers and a DeepSpeed engine steps one: "
            "train it with trainer=ddp (and trainer.strategy=ddp_find_unused_parameters_true), cpu or gpu"
        )
    values = OmegaConf.to_container(cfg.objective, resolve=True)
    config = OBJECTIVES.get(name).config_class.collect(values, "objective", problems)
    if config is not None and isinstance(strategy, Mapping) and strategy.get("name") == "deepspeed" and count == 1:
        problems.extend(config.deepspeed_problems(zero_stage(cfg.trainer) == 3))
    return config


def check_env(cfg: DictConfig, problems: Problems, data: DataSettings | None) -> None:
    """``env``: an environment the objective rolls out in (its ``environments``), on scenario data, with a
    usable judge (it plays the user). The environment's own settings are the objective's (``objective.env``)."""
    name, objective = str(cfg.env.name), str(cfg.objective.name)
    if name == "none":
        return
    if objective not in OBJECTIVES.names() or name not in OBJECTIVES.get(objective).environments:
        able = [o for o in OBJECTIVES.names() if name in OBJECTIVES.get(o).environments]
        problems.append(
            f"env={name}: objective={objective} rolls out in no environment; choose objective={'|'.join(able)}"
        )
        return
    if data is not None and data.format != "conversation":
        problems.append(
            f"env={name} trains on conversation scenarios (data=conversation), got data.format={data.format}"
        )
    if data is not None and data.val_fraction:
        problems.append(
            f"data.val_fraction={data.val_fraction}: env={name}'s scenarios have no reference to hold out a "
            "loss on; set data.val_fraction=0"
        )
    judge = check_judge(OmegaConf.to_container(cfg.env.judge, resolve=True), "env.judge", problems)
    if judge is not None:
        check_judge_key(judge, "env.judge", problems)


def check_judge(judge: Mapping[str, Any], where: str, problems: Problems) -> EndpointSettings | None:
    """A judge group's typed settings (None: backend none); a local judge's served model is one rpbench knows."""
    backend = str(judge.get("backend"))
    if not _choice(problems, f"{where}.backend", backend, backends()) or backend == "none":
        return None
    server = judge.get("server")  # what a local judge serves: named even when the rest of the group is not
    if isinstance(server, Mapping) and isinstance(server.get("model"), str | Mapping):
        problems.extend(served_model_problems(server["model"], f"{where}.server.model"))
    return EndpointSettings.collect(judge, where, problems)


def served_model_problems(model: str | Mapping[str, Any], where: str) -> Problems:
    """A local judge's model: a conf/model entry, or a model config (parsed as the model group) naming its
    weights."""
    if isinstance(model, str):
        options = model_options()
        return [] if not options or model in options else [f"{where}={model!r}: choose one of {', '.join(options)}"]
    if not model.get("name_or_path"):
        return [
            f"{where}.name_or_path is not set: give the served model's folder "
            "(judge=mmrole_rm: judge.model=<reward-model run>/model)"
        ]
    found: Problems = []
    ModelSettings.collect(model, where, found)
    return found


def check_judge_key(judge: EndpointSettings, where: str, problems: Problems) -> None:
    """The judge's API key, when it calls an endpoint that needs one (the key is read, never kept)."""
    if judge.backend in ("local", "replay"):  # rpbench's own server on 127.0.0.1, or recorded replies: no key
        return
    try:
        api_key(judge.base_url, judge.api_key_env, f"{where}.api_key_env")
    except ConfigError as error:
        problems.append(f"{error} (or choose judge=local|vllm|none)")


def check_evaluator(
    cfg: DictConfig, problems: Problems, data: DataSettings | None, judge: EndpointSettings | None
) -> Settings | None:
    """The evaluator's typed settings (its benchmark's ``settings_class``); judge and evaluator fit together,
    the judge is usable."""
    ev = cfg.evaluator
    name = str(ev.name)
    if name == "none" or not _choice(problems, "evaluator.name", name, BENCHMARKS.names()):
        return None
    benchmark = BENCHMARKS.get(name)
    settings = benchmark.settings_class.collect(OmegaConf.to_container(ev, resolve=True), "evaluator", problems)
    backend = str(cfg.judge.backend)
    judge_read = backend == "none" or judge is not None  # else its own problems are reported
    if settings is not None and data is not None and judge_read:
        problems.extend(benchmark.problems(settings, data, judge))
    if backend == "none" or backend not in backends():
        return settings
    if name not in judged_benchmarks():
        problems.append(
            f"judge={backend}: evaluator={name} has no judge protocol; judged evaluators: "
            f"{', '.join(judged_benchmarks())} (or judge=none)"
        )
    elif judge is not None and (settings is None or benchmark.needs_judge(settings)):
        check_judge_key(judge, "judge", problems)
    return settings


def check_probe(cfg: DictConfig, problems: Problems) -> Settings | None:
    """The probe's typed settings (its ``settings_class``); a probe comparing against the run's evaluation
    needs an evaluator."""
    probe = cfg.probe
    name = str(probe.name)
    if not _choice(problems, "probe.name", name, PROBES.names()):
        return None
    registered = PROBES.get(name)
    if registered.needs_evaluation and str(cfg.evaluator.name) == "none":
        problems.append(f"probe={name} compares against the run's evaluation: choose an evaluator")
    return registered.settings_class.collect(OmegaConf.to_container(probe, resolve=True), "probe", problems)


def check_overlaps(
    objective: ObjectiveSettings | None,
    evaluator: Settings | None,
    judge: EndpointSettings | None,
    model: ModelSettings,
    run: RunSettings,
    composed: Mapping[str, Any],
) -> tuple[str, ...]:
    """The parts of the run one model plays twice (``rpbench.scoring.judge.parties``), asked of the objective and
    the evaluator: a ConfigError naming each overlap not allowed and the setting that allows it; the allowed
    ones' warnings. The evaluator compares its judge with the judges that rewarded the evaluated model: this
    run's training, and the runs ``init_from`` started from (their config.yaml)."""
    found = objective.overlaps() if objective is not None else []
    if evaluator is not None:
        trained = rewarding_judges(composed, None, "this run") if objective is not None else []
        trained += trained_by(run.init_from)
        found += BENCHMARKS.get(evaluator.name).overlaps(evaluator, judge, model, trained)
    refused = [overlap.problem() for overlap in found if not overlap.allowed]
    if refused:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(refused))
    return tuple(overlap.warning() for overlap in found)


def generation_context_problems(evaluator: Settings | None, model: ModelSettings) -> list[str]:
    """The evaluated model's replies (``evaluator.generation.max_new_tokens``, generated here: backend local or
    vllm) fit in its context."""
    generation = getattr(evaluator, "generation", None)
    if not isinstance(generation, GenerationSettings) or evaluator.backend == "endpoint":
        return []
    if not BENCHMARKS.get(evaluator.name).evaluates_model(evaluator):  # nothing generates
        return []
    key, name = "evaluator.generation.max_new_tokens", model.name
    return generation_length_problems(generation.max_new_tokens, model_context(model), key, name)


@dataclass(frozen=True)
class TrainEvalRun:
    """The typed parts of a run the stages receive, each parsed once by ``validate``."""

    objective: ObjectiveSettings | None  # None: nothing trains
    evaluator: Settings | None  # the benchmark's settings; None: no evaluation
    probe: Settings  # the probe's settings (probe=none: its name alone)
    judge: EndpointSettings | None  # the judge's settings (evaluation, judge rewards, synthesis); None: judge=none
    training: TrainingSettings | None  # the training stage's settings; None: nothing trains
    data: DataSettings  # the data stage's settings (read by training, evaluation and the probes too)
    model: ModelSettings  # the run's model: pointed at init_from's saved model when set
    trainer: TrainerSettings  # the trainer group (training's strategy; the device evaluation and probes run on)
    run: RunSettings  # the run's name, seed, start (init_from: the earlier run trained from) and checkpoints
    export: ExportSettings  # the LoRA adapter's export and the Hub upload of model/ (export.push_to_hub)
    output_dir: Path  # paths.output_dir: where the run writes
    logger: LoggerSettings  # the logger option's settings (rpbench.loggers)
    composed: Mapping[str, Any]  # the whole config resolved: written to config.yaml and given to the logger
    overlaps: tuple[str, ...]  # what the run's parts share, allowed (rpbench.scoring.judge.parties): its warnings


def validate(cfg: DictConfig) -> TrainEvalRun | SynthesisRun | ServeRun:
    """The typed run of ``cfg.task`` (train_eval: a TrainEvalRun; synthesize: a SynthesisRun; serve: a ServeRun);
    a ConfigError listing every problem of ``cfg`` when there is any. The user's ``plugins`` are imported first:
    names are checked against the registries they add to."""
    import_plugins(list(cfg.plugins))
    if cfg.task == "synthesize":
        return synthesis_run(cfg)
    if cfg.task == "serve":
        return serving_run(cfg)
    if cfg.task != "train_eval":
        raise ConfigError(f"task={cfg.task}: choose one of train_eval, synthesize, serve")
    run_keys = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])  # Hydra's own node: unset until run
    check_set(run_keys)
    problems: Problems = []
    run = check_run(cfg, problems)
    model = check_model(cfg, problems)
    data = data_settings_problems(OmegaConf.to_container(cfg.data, resolve=True), problems)
    probe = check_probe(cfg, problems)
    objective = check_objective(cfg, problems)
    check_env(cfg, problems, data)
    judge = check_judge(OmegaConf.to_container(cfg.judge, resolve=True), "judge", problems)
    evaluator = check_evaluator(cfg, problems, data, judge)
    problems += trainer_problems(cfg.trainer, cfg.objective)
    export = ExportSettings.collect(OmegaConf.to_container(cfg.export, resolve=True), "export", problems)
    if export is not None and run is not None:
        problems += export_problems(export, run.save_model)
    logger = check_logger(cfg, problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    length = generation_context_problems(evaluator, model)  # reads the weights' config: after the cheap checks
    if length:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(length))
    composed = OmegaConf.to_container(run_keys, resolve=True)
    overlaps = check_overlaps(objective, evaluator, judge, model, run, composed)
    trainer = TrainerSettings(OmegaConf.to_container(cfg.trainer, resolve=True))
    training = None if objective is None else training_settings(cfg, objective, data, model, trainer, run, export)
    return TrainEvalRun(
        objective=objective,
        evaluator=evaluator,
        probe=probe,
        training=training,
        judge=judge,
        data=data,
        model=model,
        trainer=trainer,
        run=run,
        export=export,
        output_dir=Path(cfg.paths.output_dir),
        logger=logger,
        composed=types.MappingProxyType(composed),
        overlaps=overlaps,
    )


def check_set(keys: DictConfig) -> None:
    """A ConfigError naming every key of ``keys`` left ``???`` by a shared file (conf/model/common) no config set."""
    unset = sorted(OmegaConf.missing_keys(keys))
    if unset:
        raise ConfigError(f"invalid configuration: no value for {', '.join(unset)} (`???`: the config must set it)")


def serving_run(cfg: DictConfig) -> ServeRun:
    """``task=serve``'s settings: the model group (as a run's: ``init_from``'s saved model when set) and the
    ``serve`` group."""
    check_set(OmegaConf.masked_copy(cfg, ["model", "serve"]))
    problems: Problems = []
    check_init_from(cfg.init_from, problems)  # the rest of the run's keys (its name, seed...) are a training run's
    model = check_model(cfg, problems)
    serve = ServeSettings.collect(OmegaConf.to_container(cfg.serve, resolve=True), "serve", problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return ServeRun(model=model, serve=serve)


def synthesis_run(cfg: DictConfig) -> SynthesisRun:
    """``task=synthesize``'s settings: the recipe, the generator (the judge group) and the RoleMRC test labels of
    ``data`` (a RoleMRC-format data config, e.g. the default sample)."""
    if cfg.synth is None:
        raise ConfigError("task=synthesize needs a synthesis recipe: synth=rolemrc")
    problems: Problems = []
    run = check_run(cfg, problems)
    prompts = PromptSettings.collect(OmegaConf.to_container(cfg.prompts, resolve=True), "prompts", problems)
    judge = check_judge(OmegaConf.to_container(cfg.judge, resolve=True), "judge", problems)
    synth = SynthSettings.collect(OmegaConf.to_container(cfg.synth, resolve=True), "synth", problems)
    data = data_settings_problems(OmegaConf.to_container(cfg.data, resolve=True), problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    if judge is None and any(s in synth.stages for s in ("profiles", "dialogues")):
        raise ConfigError("task=synthesize: the generator is the judge config; choose judge=openai|vllm|local|replay")
    if not (isinstance(data.options, RoleMRCOptions) and data.options.task_dimensions):
        raise ConfigError(f"task=synthesize writes RoleMRC files: data={data.name} is not a RoleMRC-format config")
    return SynthesisRun(
        synth=synth,
        judge=judge,
        seed=run.seed,
        prompts_source=prompts.source,
        rolemrc=data.options,
    )


def check_test_records(spec: TrainEvalRun, examples: Sequence[EvalExample]) -> None:
    """What the evaluator's benchmark needs of the test records read (``Benchmark.record_problems``): a
    ConfigError listing it, when the records are read, before any model loads."""
    ev = spec.evaluator
    problems = BENCHMARKS.get(ev.name).record_problems(ev, spec.data, examples) if ev is not None else []
    if problems:
        raise ConfigError("invalid test records:\n  " + "\n  ".join(problems))


def check_model_source(spec: TrainEvalRun) -> None:
    """Before a run loads its model: one it cannot reach (a hub id missing from the cache while the Hub is
    offline) is a ConfigError naming ``model.name_or_path`` and what to do. Not part of ``validate``: a run that
    loads no model (an endpoint evaluation) does not need it."""
    problems = hub_problems(spec.model)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def check_test_images(spec: TrainEvalRun, examples: Sequence[EvalExample]) -> None:
    """Test records with images, generated for in-process: a model whose family takes images sees them;
    a text-only model, and any probe (probes render text), needs ``data.images=drop``. Checked when
    the records are read, before training."""
    # with data.images=drop the records hold no image; an evaluator may show the model none (MMRole's ablation)
    ev = spec.evaluator
    if ev is not None and not BENCHMARKS.get(ev.name).shows_images(ev):
        return
    takes_images = family_of(spec.model).takes_images
    probes = PROBES.get(spec.probe.name).needs_model
    if takes_images and not probes:
        return
    with_image = next((e for e in examples if any(turn.image for turn in e.prompt)), None)
    if with_image is None:
        return
    if takes_images:
        raise ConfigError(
            f"data={spec.data.name}: test record {with_image.id!r} has an image, and probe={spec.probe.name} "
            "renders text only: set data.images=drop to probe without the images"
        )
    raise ConfigError(
        f"data={spec.data.name}: test record {with_image.id!r} has an image, and model={spec.model.name} is "
        "text-only: choose a model whose family takes images (e.g. model=tiny-qwen2-vl), "
        "evaluator.backend=endpoint with a multimodal server, or data.images=drop to generate from the "
        "text alone (counted)"
    )
