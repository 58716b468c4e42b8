"""Checks of a whole run configuration at startup, before a model is loaded or trained.

``validate(cfg)`` raises one ConfigError listing every problem found, each naming the key, its value and
what is allowed (the allowed names come from the registries and config groups that define them).
``check_test_images`` checks the records read against the evaluator, still before training.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.data.records import EvalExample
from rpbench.data.spec import DataSpec, data_spec_problems
from rpbench.eval.benchmarks import BENCHMARKS, judged_benchmarks
from rpbench.export.hub import export_problems
from rpbench.models import family_of
from rpbench.models.checks import generation_length_problems, hub_problems, model_context, model_problems
from rpbench.models.config_tree import model_config, model_options
from rpbench.models.generation import GenerationOptions
from rpbench.models.quantization import quantization_problems
from rpbench.objectives.config import ObjectiveConfig
from rpbench.objectives.registry import OBJECTIVES
from rpbench.probes.stage import PROBES
from rpbench.scoring.endpoints import api_key
from rpbench.scoring.judge.client import BACKENDS, JudgeConfig, judge_reply_length_problems
from rpbench.training.fit import zero_stage
from rpbench.training.options import TrainerOptions, trainer_problems
from rpbench.training.resume import RESUME_CHOICES
from rpbench.training.spec import TrainingSpec, training_spec

MAX_SEED = 2**32 - 1  # numpy's seed range, which Lightning's seed_everything enforces

Problems = list[str]


def _integer(value: Any) -> int | None:
    """``value`` as an int when it is one (an integral float or a numeric string too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _check(problems: Problems, cfg: DictConfig, key: str, ok: Callable[[Any], bool], expected: str) -> None:
    """Add a problem when the run config's ``key`` (dotted) fails ``ok``."""
    value = OmegaConf.select(cfg, key)
    if not ok(value):
        problems.append(f"{key}={value!r}: expected {expected}")


def _at_least(minimum: int, optional: bool = False) -> Callable[[Any], bool]:
    def ok(value: Any) -> bool:
        if value is None:
            return optional
        number = _integer(value)
        return number is not None and number >= minimum

    return ok


def _choice(problems: Problems, key: str, value: Any, allowed: Sequence[str]) -> bool:
    if str(value) in allowed:
        return True
    problems.append(f"{key}={value!r}: choose one of {', '.join(allowed)}")
    return False


def check_run(cfg: DictConfig, problems: Problems) -> None:
    """Seed, a model marked unsupported, where training starts from, and how often it is checkpointed."""
    _check(
        problems,
        cfg,
        "seed",
        lambda v: (n := _integer(v)) is not None and 0 <= n <= MAX_SEED,
        f"an integer from 0 to {MAX_SEED}",
    )
    _check(problems, cfg, "checkpoint_every_n_steps", _at_least(1, optional=True), "null or an integer >= 1")
    _choice(problems, "resume", cfg.resume, RESUME_CHOICES)
    if cfg.model.get("unsupported"):
        problems.append(f"model={cfg.model.name}: {cfg.model.unsupported}")
    problems.extend(quantization_problems(cfg.model))
    if cfg.get("init_from") and not (Path(str(cfg.init_from)) / "model").is_dir():
        problems.append(f"init_from={cfg.init_from}: expected a run folder with a saved 'model' in it")


def check_images(cfg: DictConfig, problems: Problems) -> None:
    """The image settings of the model: ``model.freeze_vision`` (read by families with a vision tower
    only), LoRA (adapts the language model only) and packing (carries no images)."""
    try:
        family = family_of(cfg.model)
    except (KeyError, ValueError) as error:
        problems.append(f"model.family: {error}")
        return
    freeze = cfg.model.get("freeze_vision")
    if family.vision_module is None:
        if freeze is not None:
            problems.append(
                f"model.freeze_vision={freeze!r}: model={cfg.model.name} has no vision tower; remove the key"
            )
        return
    if freeze not in (True, False):
        problems.append(f"model.freeze_vision={freeze!r}: expected true (vision tower frozen) or false (trained)")
    elif cfg.model.get("lora") and not freeze:
        problems.append(
            "model.freeze_vision=false with model.lora: LoRA adapts the language model only and leaves the "
            "vision tower frozen; set model.freeze_vision=true (or train without LoRA)"
        )
    if family.takes_images and str(cfg.objective.name) != "none" and cfg.objective.get("packing"):
        problems.append(
            f"objective.packing=true: model={cfg.model.name} takes images, which packed batches cannot carry; "
            "set objective.packing=false"
        )


def check_objective(cfg: DictConfig, problems: Problems) -> ObjectiveConfig | None:
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


def check_env(cfg: DictConfig, problems: Problems, data: DataSpec | None) -> None:
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


def check_judge(judge: Mapping[str, Any], where: str, problems: Problems) -> JudgeConfig | None:
    """A judge group's typed settings (None: backend none); a local judge's served model is one rpbench knows."""
    backend = str(judge.get("backend"))
    if not _choice(problems, f"{where}.backend", backend, BACKENDS) or backend == "none":
        return None
    server_model = (judge.get("server") or {}).get("model")
    if backend == "local" and isinstance(server_model, str) and (options := model_options()):
        _choice(problems, f"{where}.server.model", server_model, options)
    elif backend == "local" and isinstance(server_model, Mapping) and not server_model.get("name_or_path"):
        problems.append(
            f"{where}.server.model.name_or_path is not set: give the served model's folder "
            "(judge=mmrole_rm: judge.model=<reward-model run>/model)"
        )
    return JudgeConfig.collect(judge, where, problems)


def check_judge_key(judge: JudgeConfig, where: str, problems: Problems) -> None:
    """The judge's API key, when it calls an endpoint that needs one (the key is read, never kept)."""
    if judge.backend == "local":  # rpbench's own server on 127.0.0.1: no key
        return
    try:
        api_key(judge.base_url, judge.api_key_env, f"{where}.api_key_env")
    except ConfigError as error:
        problems.append(f"{error} (or choose judge=local|vllm|none)")


def check_evaluator(
    cfg: DictConfig, problems: Problems, data: DataSpec | None, judge: JudgeConfig | None
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
    if backend == "none" or backend not in BACKENDS:
        return settings
    if name not in judged_benchmarks():
        problems.append(
            f"judge={backend}: evaluator={name} has no judge protocol; judged evaluators: "
            f"{', '.join(judged_benchmarks())} (or judge=none)"
        )
    elif judge is not None and (settings is None or benchmark.needs_judge(settings)):
        check_judge_key(judge, "judge", problems)
        for key, expected in judge_reply_length_problems(judge, benchmark.judge_task):
            problems.append(f"{key}: missing; expected {expected}")
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


def generation_context_problems(evaluator: Settings | None, model: Mapping[str, Any]) -> list[str]:
    """The evaluated model's replies (``evaluator.generation.max_new_tokens``, generated here: backend local or
    vllm) fit in its context."""
    generation = getattr(evaluator, "generation", None)
    if not isinstance(generation, GenerationOptions) or evaluator.backend == "endpoint":
        return []
    key, name = "evaluator.generation.max_new_tokens", str(model.get("name"))
    return generation_length_problems(generation.max_new_tokens, model_context(model), key, name)


@dataclass(frozen=True)
class RunSpec:
    """The typed parts of a run the stages receive, each parsed once by ``validate``."""

    objective: ObjectiveConfig | None  # None: nothing trains
    evaluator: Settings | None  # the benchmark's settings; None: no evaluation
    probe: Settings  # the probe's settings (probe=none: its name alone)
    judge: JudgeConfig | None  # the judge's settings (evaluation, judge rewards, synthesis); None: judge=none
    training: TrainingSpec | None  # the training stage's settings; None: nothing trains
    data: DataSpec  # the data stage's settings (read by training, evaluation and the probes too)
    model: Mapping[str, Any]  # the run's model config, resolved: pointed at init_from's saved model when set
    trainer: TrainerOptions  # the trainer group (training's strategy; the device evaluation and probes run on)


def validate(cfg: DictConfig) -> RunSpec:
    """The run's typed parts; a ConfigError listing every problem of ``cfg`` when there is any."""
    run_keys = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])  # Hydra's own node: unset until run
    unset = sorted(OmegaConf.missing_keys(run_keys))  # `???` of a shared file (conf/model/common) no config set
    if unset:
        raise ConfigError(f"invalid configuration: no value for {', '.join(unset)} (`???`: the config must set it)")
    problems: Problems = []
    for check in (check_run, check_images):
        check(cfg, problems)
    data = data_spec_problems(OmegaConf.to_container(cfg.data, resolve=True), problems)
    probe = check_probe(cfg, problems)
    objective = check_objective(cfg, problems)
    check_env(cfg, problems, data)
    judge = check_judge(OmegaConf.to_container(cfg.judge, resolve=True), "judge", problems)
    evaluator = check_evaluator(cfg, problems, data, judge)
    problems += model_problems(OmegaConf.to_container(cfg.model, resolve=True))
    problems += trainer_problems(cfg.trainer, cfg.objective)
    problems += export_problems(cfg)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    model = types.MappingProxyType(model_config(cfg))
    length = generation_context_problems(evaluator, model)  # reads the weights' config: after the cheap checks
    if length:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(length))
    trainer = TrainerOptions(OmegaConf.to_container(cfg.trainer, resolve=True))
    training = None if objective is None else training_spec(cfg, objective, data, model, trainer)  # checked above
    return RunSpec(
        objective=objective,
        evaluator=evaluator,
        probe=probe,
        training=training,
        judge=judge,
        data=data,
        model=model,
        trainer=trainer,
    )


def check_test_records(spec: RunSpec, examples: Sequence[EvalExample]) -> None:
    """What the evaluator's benchmark needs of the test records read (``Benchmark.record_problems``): a
    ConfigError listing it, when the records are read, before any model loads."""
    ev = spec.evaluator
    problems = BENCHMARKS.get(ev.name).record_problems(ev, spec.data, examples) if ev is not None else []
    if problems:
        raise ConfigError("invalid test records:\n  " + "\n  ".join(problems))


def check_model_source(spec: RunSpec) -> None:
    """Before a run loads its model: one it cannot reach (a hub id missing from the cache while the Hub is
    offline) is a ConfigError naming ``model.name_or_path`` and what to do. Not part of ``validate``: a run that
    loads no model (an endpoint evaluation) does not need it."""
    problems = hub_problems(spec.model)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def check_test_images(spec: RunSpec, examples: Sequence[EvalExample]) -> None:
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
        f"data={spec.data.name}: test record {with_image.id!r} has an image, and model={spec.model['name']} is "
        "text-only: choose a model whose family takes images (e.g. model=tiny-qwen2-vl), "
        "evaluator.backend=endpoint with a multimodal server, or data.images=drop to generate from the "
        "text alone (counted)"
    )
