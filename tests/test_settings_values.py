"""Every group's settings are checked at startup from their typed configs: each out-of-range value below is
named (key, value, what is allowed) by ``validate`` before anything loads, instead of a traceback after
training or a run that silently does something else (greedy for a NaN temperature, no clipping for a
negative max_grad_norm, NaN intervals for confidence 2, nothing trained for max_steps=0).

The cases are classes of values (type, range, finiteness, choice, presence, existence) per config group; one
test feeds each the composed config Hydra builds from the command line, as run.py does."""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.core.paths import CONF_DIR
from rpbench.core.typed import Elsewhere, Settings, defaults_declared
from rpbench.validate import validate

GENERATION = [
    ("evaluator.generation.top_p=1.5", "evaluator.generation.top_p=1.5: expected a share in (0, 1]"),
    ("evaluator.generation.top_p=abc", "evaluator.generation.top_p='abc': expected a finite number"),
    ("evaluator.generation.temperature=nan", "evaluator.generation.temperature=nan: expected a finite number"),
    ("evaluator.generation.temperature=inf", "evaluator.generation.temperature=inf: expected a finite number"),
    ("evaluator.generation.temperature=-1", "evaluator.generation.temperature=-1.0: expected a number >= 0"),
    ("evaluator.generation.top_k=-1", "evaluator.generation.top_k=-1: expected an integer >= 0"),
    ("evaluator.generation.max_new_tokens=0", "evaluator.generation.max_new_tokens=0: expected an integer >= 1"),
    ("evaluator.generation.max_new_tokens=2.5", "evaluator.generation.max_new_tokens=2.5: expected an integer"),
    ("evaluator.generation.batch_size=0", "evaluator.generation.batch_size=0: expected an integer >= 1"),
    ("evaluator.generation.cache=paged", "evaluator.generation.cache='paged': expected one of dynamic, static"),
    ("+evaluator.generation.top_n=3", "evaluator.generation.top_n: unknown key"),
    (
        "evaluator.generation.merge_timeout_s=0",
        "evaluator.generation.merge_timeout_s=0.0: expected a number of seconds",
    ),
    ("evaluator.generation.max_prompt_length=0", "evaluator.generation.max_prompt_length=0: expected null or an"),
    ("evaluator.generation.chat_template=chatlm", "evaluator.generation.chat_template='chatlm': expected null (the"),
    ("evaluator.generation.reply_tag='<reply>'", "evaluator.generation.reply_tag='<reply>': expected null or a tag"),
    ("evaluator.generation.stop=['']", "evaluator.generation.stop=['']: expected a list of non-empty strings"),
]
STATISTICS = [
    ("evaluator.bootstrap.n_resamples=0", "evaluator.bootstrap.n_resamples=0: expected an integer >= 1"),
    ("evaluator.bootstrap.confidence=2", "evaluator.bootstrap.confidence=2.0: expected a level in (0, 1)"),
    ("evaluator.bootstrap.method=bootstrap", "evaluator.bootstrap.method='bootstrap': expected one of percentile, BCa"),
    ("evaluator.metrics=[]", "evaluator.metrics=[]: expected at least one metric"),
    ("evaluator.metrics=[rouge9]", "evaluator.metrics=['rouge9']: expected names from"),
    ("evaluator.radar_metric=bleurt", "evaluator.radar_metric='bleurt': expected null or a metric name"),
    ("evaluator.bleu.empty=skip", "evaluator.bleu.empty='skip': expected one of drop, zero"),
    ("evaluator.rougeLsum.order=any", "evaluator.rougeLsum.order='any': expected one of"),
    ("evaluator.rouge.tokenizer=spacy", "evaluator.rouge.tokenizer='spacy': expected one of rouge_score, cjk"),
]
ENDPOINTS = [
    ("evaluator.backend=endpoint", "evaluator.endpoint.base_url=None: expected set with backend=endpoint"),
    ("evaluator.backend=remote", "evaluator.backend='remote': expected one of local, vllm, endpoint"),
    ("evaluator.endpoint.concurrency=0", "evaluator.endpoint.concurrency=0: expected an integer >= 1"),
    ("evaluator.endpoint.timeout_s=0", "evaluator.endpoint.timeout_s=0.0: expected a number of seconds > 0"),
    ("evaluator.endpoint.max_retries=-1", "evaluator.endpoint.max_retries=-1: expected an integer >= 0"),
    ("evaluator.judge_prompt_file=no_such_prompts.yaml", "evaluator.judge_prompt_file='no_such_prompts.yaml'"),
]
OPTIMISATION = [
    ("objective.weight_decay=-0.1", "objective.weight_decay=-0.1: expected a number >= 0"),
    ("objective.max_grad_norm=-1", "objective.max_grad_norm=-1.0: expected null (no clipping) or a number > 0"),
    ("objective.adam_betas=[0.9,1.5]", "objective.adam_betas=[0.9, 1.5]: expected two numbers in [0, 1)"),
    ("objective.adam_eps=0", "objective.adam_eps=0.0: expected a number > 0"),
    ("objective.scheduler=cosine_annealing", "objective.scheduler='cosine_annealing': expected a transformers"),
    ("objective.warmup_ratio=1.5", "objective.warmup_ratio=1.5: expected a share of the steps, 0 <= r <= 1"),
    ("objective.num_workers=-1", "objective.num_workers=-1: expected an integer >= 0"),
    ("objective.val_every_n_steps=0", "objective.val_every_n_steps=0: expected null (once per epoch) or an integer"),
    ("objective.max_tokens_per_batch=0", "objective.max_tokens_per_batch=0: expected an integer >= 1"),
    ("objective.packing=yes", "objective.packing='yes': expected true or false"),
]
TRAINER = [
    ("trainer.max_steps=0", "trainer.max_steps=0: expected -1 (objective.epochs decide) or an integer >= 1"),
    ("trainer.limit_train_batches=0", "trainer.limit_train_batches=0: expected null, a number of batches >= 1"),
    ("trainer.val_check_interval=0", "trainer.val_check_interval=0: expected null, micro-batches >= 1"),
    ("trainer.precision=fp8", "trainer.precision='fp8': expected one of"),
    ("trainer.devices=0", "trainer.devices=0: expected auto, -1 (all), a count >= 1"),
    ("trainer.accelerator=npu", "trainer.accelerator='npu': expected one of"),
]
MODEL = [
    ("model.dtype=fp8", "model.dtype='fp8': expected one of float32, bfloat16, float16"),
    ("model.attn_implementation=fast", "model.attn_implementation='fast': expected one of"),
    ("model.lora={r:0,alpha:16,dropout:0.0,target_modules:[q_proj]}", "model.lora.r=0: expected an integer rank >= 1"),
    ("model.lora={r:8,alpha:16,dropout:1.5,target_modules:[q_proj]}", "model.lora.dropout=1.5: expected a probability"),
    ("model.lora={r:8,rank:4}", "model.lora.rank: unknown key"),
    ("model.name_or_path=./no/such/model", "model.name_or_path='./no/such/model': expected a Hugging Face hub id"),
]
TRAINING = [  # the training stage's typed settings (rpbench/training/settings.py)
    ("save_model=yes", "save_model='yes': expected true or false"),
    ("ckpt_path=3", "ckpt_path=3: expected a string or null"),
    ("export.lora_adapter=2", "export.lora_adapter=2: expected true or false"),
]
CASES = GENERATION + STATISTICS + ENDPOINTS + OPTIMISATION + TRAINER + MODEL + TRAINING


@pytest.fixture(scope="module")
def default_config(tmp_path_factory, composed):
    """The default run's composed config (composed once: each case changes one key of a copy)."""
    from hydra.core.global_hydra import GlobalHydra

    cfg = composed(tmp_path_factory.mktemp("run"))
    yield cfg
    GlobalHydra.instance().clear()


def with_override(cfg, override: str):
    """``cfg`` with one command-line override applied, its value parsed by Hydra's own override grammar."""
    parsed = OverridesParser.create().parse_override(override)
    changed = cfg.copy()
    OmegaConf.update(changed, parsed.key_or_group, parsed.value(), merge=False, force_add=True)
    return changed


@pytest.mark.slow
@pytest.mark.parametrize(("override", "named"), CASES, ids=[c[0] for c in CASES])
def test_an_out_of_range_value_is_named_at_startup(default_config, override, named):
    with pytest.raises(ConfigError) as error:
        validate(with_override(default_config, override))
    assert named in str(error.value)


def test_the_judge_is_parsed_once_at_startup_naming_each_bad_key(compose):
    overrides = [
        "judge.concurrency=0",
        "judge.parse_failure=zero",
        "judge.warn_parse_failure_rate=2",
        "~judge.retry_after_max_s",
    ]
    with pytest.raises(ConfigError) as error:
        validate(compose("judge=vllm", *overrides))
    assert [line.strip() for line in str(error.value).splitlines()[1:]] == [
        "judge.retry_after_max_s: missing (it has no default in code: set it in the YAML)"
    ]
    with pytest.raises(ConfigError) as error:
        validate(compose("judge=vllm", *overrides[:3]))
    assert [line.split(":")[0].strip() for line in str(error.value).splitlines()[1:]] == [
        "judge.concurrency=0",
        "judge.parse_failure='zero'",
        "judge.warn_parse_failure_rate=2.0",
    ]
    judge = validate(compose("judge=vllm")).judge
    assert (judge.backend, judge.max_retries, judge.retry_after_max_s) == ("vllm", 6, 120.0)
    assert validate(compose("judge=none")).judge is None


def test_the_default_run_is_valid(default_config):
    assert validate(default_config).objective.name == "sft"


SERVE = [
    ("serve.max_batch_size=0", "serve.max_batch_size=0: expected an integer >= 1"),
    ("serve.max_queue=-1", "serve.max_queue=-1: expected an integer >= 1"),
    ("serve.max_tokens=1.5", "serve.max_tokens=1.5: expected an integer"),
    ("serve.batch_wait_ms=-5", "serve.batch_wait_ms=-5.0: expected a number of milliseconds >= 0"),
    ("serve.port=65536", "serve.port=65536: expected a port from 0 (a free one) to 65535"),
    ("serve.host=''", "serve.host='': expected an address to listen on"),
    ("serve.name=[a]", "serve.name=['a']: expected a string or null"),
    ("+serve.workers=2", "serve.workers: unknown key; valid keys: batch_wait_ms, host, max_batch_size"),
]


@pytest.mark.parametrize(("override", "named"), SERVE, ids=[c[0] for c in SERVE])
def test_a_bad_serve_setting_is_named_at_startup(default_config, override, named):
    with pytest.raises(ConfigError) as error:
        validate(with_override(with_override(default_config, "task=serve"), override))
    assert named in str(error.value)


def test_task_serve_validates_to_the_model_and_serve_settings(compose, tmp_path):
    """task=serve (run.py, python -m rpbench.serve): the typed model and serve groups, nothing else; every
    problem of both named at once; init_from's saved model is the one served."""
    from rpbench.serve.settings import ServeRun, ServeSettings

    run = validate(compose("task=serve", "model=tiny-llama", "serve.max_batch_size=4", "objective.lr=-1"))
    assert isinstance(run, ServeRun) and [f.name for f in dataclasses.fields(run)] == ["model", "serve"]
    assert run.model.name == "tiny-llama" and isinstance(run.serve, ServeSettings)
    assert (run.serve.max_batch_size, run.serve.port, run.serve.host) == (4, 0, "127.0.0.1")  # the YAML's others
    assert problem_lines(compose("task=serve", "serve.max_queue=0", "model.dtype=fp8", "init_from=nowhere")) == [
        "init_from=nowhere: expected a run folder with a saved 'model' in it; no such folder",
        "model.dtype='fp8': expected one of float32, bfloat16, float16",
        "serve.max_queue=0: expected an integer >= 1",
    ]
    (tmp_path / "trained" / "model").mkdir(parents=True)
    assert validate(compose("task=serve", f"init_from={tmp_path / 'trained'}")).model.name_or_path == str(
        tmp_path / "trained" / "model"
    )
    short = tmp_path / "short"  # a debug=short run's folder: config.yaml says so, and no model/ was saved
    short.mkdir()
    (short / "config.yaml").write_text("short_run: debug=short\nsave_model: false\n")
    assert problem_lines(compose("task=serve", f"init_from={short}")) == [
        f"init_from={short}: expected a run folder with a saved 'model' in it; it is a short run (debug=short), and"
        " a short run saves no model: run it again without debug=short"
    ]
    with pytest.raises(ConfigError, match="task=served: choose one of train_eval, synthesize, serve"):
        validate(compose("task=served"))


def test_only_the_entry_points_and_validation_see_the_composed_config():
    """``pipeline.run``, the synthesis task and serving take the typed run ``validate`` returns; a DictConfig
    appears only in validation (and the training settings it builds), the config tree (benchmark scripts compose
    a run), the ``${rpb.*}`` resolvers and the sweep's Hydra callback."""
    import inspect

    from rpbench import pipeline
    from rpbench.serve.running import serve_run
    from rpbench.serve.settings import ServeRun
    from rpbench.synth.synthesize import SynthesisRun, synthesize_run
    from rpbench.validate import TrainEvalRun

    for entry, typed in ((pipeline.run, TrainEvalRun), (synthesize_run, SynthesisRun), (serve_run, ServeRun)):
        first = next(iter(inspect.signature(entry).parameters.values()))
        assert first.annotation in (typed, typed.__name__), entry
    allowed = {
        "cli/job.py",
        "cli/overrides.py",
        "validate.py",
        "training/settings.py",
        "models/config_tree.py",
        "resolvers.py",
        "sweep_summary.py",
    }
    package = Path(pipeline.__file__).parent
    seen = {str(p.relative_to(package)) for p in package.rglob("*.py") if "DictConfig" in p.read_text()}
    assert seen <= allowed, seen - allowed


def test_the_training_stage_receives_typed_settings_and_no_composed_config(default_config):
    """``validate`` parses the training stage's part once; nothing in it is, or holds, a config node."""
    import dataclasses
    import inspect
    from collections.abc import Mapping

    from omegaconf import DictConfig, ListConfig

    from rpbench.training import TrainingSettings, train

    def nodes(value) -> list:
        if isinstance(value, (DictConfig, ListConfig)):
            return [value]
        if dataclasses.is_dataclass(value):
            return [n for f in dataclasses.fields(value) for n in nodes(getattr(value, f.name))]
        items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
        return [n for item in items for n in nodes(item)]

    first = next(iter(inspect.signature(train).parameters.values()))  # the stage's settings, then its data
    assert (first.name, first.annotation) in (("training", "TrainingSettings"), ("training", TrainingSettings))
    training = validate(default_config).training
    assert nodes(training) == []
    assert (training.objective.name, training.split, training.run.seed) == ("sft", "train", default_config.seed)
    assert training.data.max_length == default_config.data.max_length and training.model.name == "tiny-qwen2"
    assert validate(with_override(default_config, "objective.name=none")).training is None


def test_every_problem_of_a_group_is_listed_together(compose):
    cfg = compose("evaluator.generation.top_p=0", "evaluator.generation.top_k=-2", "evaluator.bootstrap.confidence=1")
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    lines = str(error.value).splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == [
        "evaluator.generation.top_p=0.0",
        "evaluator.generation.top_k=-2",
        "evaluator.bootstrap.confidence=1.0",
    ]


def problem_lines(cfg) -> list[str]:
    """The problems ``validate`` lists for ``cfg``, one a line, in order."""
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    return [line.strip() for line in str(error.value).splitlines()[1:]]


@pytest.mark.slow
def test_each_bad_objective_value_is_named_once(compose):
    """The objective group is read by its typed config alone: a value of the wrong type, a NaN or one out of
    range is listed once (no second check elsewhere), with the key, its value and what is allowed."""
    wrong_types = ["objective.batch_size=abc", "objective.lr=fast", "objective.adam_betas=[0.9]"]
    assert problem_lines(compose(*wrong_types, "objective.adam_eps=nan", "objective.warmup_ratio=inf")) == [
        "objective.lr='fast': expected a finite number",
        "objective.warmup_ratio=inf: expected a finite number",
        "objective.adam_betas=[0.9]: expected a list of 2: a finite number, a finite number",
        "objective.adam_eps=nan: expected a finite number",
        "objective.batch_size='abc': expected an integer",
    ]
    out_of_range = ["objective.batch_size=0", "objective.lr=-1", "objective.num_workers=-2", "objective.epochs=0"]
    assert problem_lines(compose(*out_of_range)) == [
        "objective.epochs=0: expected an integer >= 1",
        "objective.batch_size=0: expected an integer >= 1",
        "objective.lr=-1.0: expected a number > 0",
        "objective.num_workers=-2: expected an integer >= 0",
    ]
    manual = ["objective=grpo", "objective.grad_accum=0", "objective.max_grad_norm=-1", "objective.temperature=-1"]
    assert problem_lines(compose(*manual, "objective.top_p=2")) == [  # GRPO's rule in place of the shared one
        "objective.grad_accum=0: expected 1, as objective=grpo optimises manually; objective.backward_chunk_size "
        "splits a step instead",
        "objective.max_grad_norm=-1.0: expected null, as objective=grpo optimises manually; objective.clip_grad_norm "
        "clips instead",
        "objective.temperature=-1.0: expected a number > 0 (a group of greedy completions is identical)",
        "objective.top_p=2.0: expected a share in (0, 1]",
    ]
    corl = ["objective=corl", "data=sample_rpgbench", "objective.top_k=-1", "objective.generation_cache=paged"]
    assert problem_lines(compose(*corl)) == [  # read by each phase's rollouts, named once
        "objective.top_k=-1: expected an integer >= 0 (0: off)",
        "objective.generation_cache='paged': expected one of dynamic, static",
    ]


def test_the_environment_s_rewards_are_named_as_the_user_sets_them(compose):
    """GRPO reads env=conversation through objective.env (``${env}``): its problems name ``env.*``."""
    overrides = ["env=conversation", "data=sample_conversation", "judge=local", "objective=grpo"]
    rewards = "env.rewards=[{name: length_penalty, weight: 1.0, kwargs: {min_len: 1, max_len: 9}}]"
    assert problem_lines(compose(*overrides, rewards, "env.max_turns=0")) == [
        "env.max_turns=0: expected an integer >= 1 (the cap on every scenario's turns)",
    ]
    assert problem_lines(compose(*overrides, rewards)) == [
        "env.rewards[0].kwargs.unit: missing (a reward has no defaults in code: set unit in its YAML entry)",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "evaluator",
    ["rolemrc", "rolebench", "mmrole", "mmrole_rm", "rpgbench", "characterllm", "conversation", "general"],
)
def test_each_evaluator_parses_to_its_typed_settings_once(compose, evaluator):
    data = {"mmrole": "sample_mmrole", "mmrole_rm": "sample_mmrole_rm", "rpgbench": "sample_rpgbench"}
    data |= {"characterllm": "sample_characterllm", "rolebench": "sample_rolebench"}
    data |= {"conversation": "sample_conversation"}
    overrides = [f"evaluator={evaluator}", f"data={data.get(evaluator, 'sample')}", "objective=none"]
    overrides += ["judge=local"] if evaluator in ("characterllm", "conversation") else []
    overrides += ["model=tiny-qwen2-vl"] if evaluator.startswith("mmrole") else []
    settings = validate(compose(*overrides)).evaluator
    assert settings.name == evaluator and defaults_declared(type(settings)) == []
    assert math.isfinite(settings.bootstrap.confidence) and settings.bootstrap.method == "percentile"


@dataclass(frozen=True, kw_only=True)
class Inner(Settings):
    share: float


@dataclass(frozen=True, kw_only=True)
class Outer(Settings):
    count: int
    names: tuple[str, ...]
    inner: Inner
    limit: int | None


def test_a_settings_class_converts_and_refuses_by_annotation():
    parsed = Outer.parse({"count": 3.0, "names": ["a"], "inner": {"share": 1}, "limit": None}, "x")
    assert parsed == Outer(count=3, names=("a",), inner=Inner(share=1.0), limit=None)
    assert type(parsed.count) is int and type(parsed.inner.share) is float
    with pytest.raises(ConfigError) as error:
        Outer.parse({"count": True, "names": "a", "inner": {"share": "x", "more": 1}, "extra": 0}, "x")
    assert [line.strip() for line in str(error.value).splitlines()[1:]] == [
        "x.extra: unknown key; valid keys: count, inner, limit, names",
        "x.count=True: expected an integer",
        "x.names='a': expected a list",
        "x.inner.more: unknown key; valid keys: share",
        "x.inner.share='x': expected a finite number",
        "x.limit: missing (it has no default in code: set it in the YAML)",
    ]


@dataclass(frozen=True, kw_only=True)
class Pointing(Settings):
    pair: tuple[int, float]
    other: str

    def problems(self):
        if self.other == "bad":
            return [Elsewhere("other_group.key=1: expected 2 (read here as x.other)"), "pair: a message of its own"]
        return []


def test_a_problem_about_another_group_s_key_is_not_prefixed():
    assert Pointing.parse({"pair": [1, 2], "other": "ok"}, "x") == Pointing(pair=(1, 2.0), other="ok")
    with pytest.raises(ConfigError) as error:
        Pointing.parse({"pair": [1, 2], "other": "bad"}, "x")
    assert [line.strip() for line in str(error.value).splitlines()[1:]] == [
        "other_group.key=1: expected 2 (read here as x.other)",
        "x.pair: a message of its own",
    ]
    for pair in ([1], [1, "a"], [1.5, 2]):
        with pytest.raises(ConfigError, match=r"x.pair=.*: expected a list of 2: an integer, a finite number$"):
            Pointing.parse({"pair": pair, "other": "ok"}, "x")


@dataclass(frozen=True, kw_only=True)
class Off(Settings):
    backend: typing.Literal["none"]


@dataclass(frozen=True, kw_only=True)
class Choice(Settings):
    judge: Outer | Off
    rubrics: None


def test_a_union_of_settings_takes_the_first_that_parses_and_none_takes_null_alone():
    off = Choice.parse({"judge": {"backend": "none"}, "rubrics": None}, "x")
    assert off.judge == Off(backend="none")
    inner = Inner(share=0.5)
    outer = Choice.parse({"judge": {"count": 1, "names": [], "inner": inner, "limit": None}, "rubrics": None}, "x")
    assert outer.judge == Outer(count=1, names=(), inner=inner, limit=None)  # a parsed value is taken as it is
    bad = {"count": "many", "names": [], "inner": {"share": 1}, "limit": None}
    with pytest.raises(ConfigError) as error:  # neither parses: the first member's problems
        Choice.parse({"judge": bad, "rubrics": {}}, "x")
    assert [line.strip() for line in str(error.value).splitlines()[1:]] == [
        "x.judge.count='many': expected an integer",
        "x.rubrics={}: expected null",
    ]


def nested_kinds(annotation: Any) -> list[Any]:
    """``annotation`` and every type inside it (union members, tuple items, mapping values), at any depth."""
    return [annotation, *(kind for arg in typing.get_args(annotation) for kind in nested_kinds(arg))]


def settings_classes() -> list[type]:
    """Every typed settings class a run reads: the run's typed parts (``TrainEvalRun``, ``SynthesisRun``), each
    registered evaluator's, probe's, objective's and data format's, the judge's and env=conversation's, with
    those nested in them (in unions, tuples and mappings too) and their bases."""
    from rpbench.data.readers import FORMATS
    from rpbench.eval.benchmarks import BENCHMARKS
    from rpbench.objectives.conversation_env import ConversationEnvSettings
    from rpbench.objectives.registry import OBJECTIVES
    from rpbench.probes.stage import PROBES
    from rpbench.scoring.chat.client import EndpointSettings
    from rpbench.synth.synthesize import SynthesisRun
    from rpbench.validate import TrainEvalRun

    found: dict[str, type] = {}

    def visit(cls: type) -> None:
        if cls.__qualname__ in found:
            return
        found[cls.__qualname__] = cls
        hints = typing.get_type_hints(cls)
        kinds = [kind for field in dataclasses.fields(cls) for kind in nested_kinds(hints[field.name])]
        for kind in (*kinds, *cls.__bases__):  # a base's fields are the subclass's, its defaults too
            if isinstance(kind, type) and dataclasses.is_dataclass(kind):
                visit(kind)

    from rpbench.serve.settings import ServeRun

    for cls in (TrainEvalRun, SynthesisRun, ServeRun, EndpointSettings, ConversationEnvSettings):
        visit(cls)
    for registry, attribute in (
        (BENCHMARKS, "settings_class"),
        (PROBES, "settings_class"),
        (OBJECTIVES, "config_class"),
        (FORMATS, "options"),
    ):
        for name in registry.names():
            visit(getattr(registry.get(name), attribute))
    return list(found.values())


def test_no_settings_class_declares_a_default_in_code():
    """Each default lives in the YAML alone: a default in a settings class (the judge's, generation's and every
    data format's options included) would be a second one."""
    from rpbench.data.mmrole.reviews import Heldout
    from rpbench.data.rpgbench import RPGBenchOptions
    from rpbench.eval.generalization.settings import EntropySettings
    from rpbench.export.hub import HubSettings
    from rpbench.models.generation import GenerationSettings
    from rpbench.models.settings import ModelSettings
    from rpbench.objectives.config import ObjectiveSettings
    from rpbench.objectives.grpo import GRPOSettings
    from rpbench.probes.stats import ProbeSettings
    from rpbench.scoring.chat.client import LocalServerSettings
    from rpbench.serve.settings import ServeSettings
    from rpbench.synth.config import SynthSettings

    classes = settings_classes()
    expected = {GenerationSettings, ObjectiveSettings, GRPOSettings, ModelSettings, HubSettings, SynthSettings}
    expected |= {RPGBenchOptions, Heldout, EntropySettings, ProbeSettings, LocalServerSettings, ServeSettings}
    assert len(classes) > 40 and expected <= set(classes)
    assert {cls.__qualname__: defaults_declared(cls) for cls in classes if defaults_declared(cls)} == {}


def unread_keys(values: Mapping[str, Any], cls: type, where: str) -> list[str]:
    """The keys under ``values`` that no field of ``cls`` reads (nested settings in turn)."""
    hints = typing.get_type_hints(cls)
    names = {field.name for field in dataclasses.fields(cls)}
    found = [f"{where}.{key}" for key in values if key not in names]
    for name in sorted(names & set(values)):
        nested = [k for k in nested_kinds(hints[name]) if dataclasses.is_dataclass(k)]
        if nested and isinstance(values[name], Mapping):
            found += unread_keys(values[name], nested[0], f"{where}.{name}")
    return found


@functools.cache
def run_values(key: str) -> Any:
    """The resolved ``key`` node of the default run (`python run.py`)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config")
    return OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=True)


def options_of(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def group_settings(group_values):
    """(group, option, its composed values, the class that reads them) for every typed group: the model, the
    data (its shared keys, and the format's options), the objective, the evaluator (every benchmark), the judge,
    the probe, the synthesis recipe, the environment and ``export.hub``."""

    def group_settings() -> list[tuple[str, str, Any, type]]:
        from rpbench.data.readers import FORMATS
        from rpbench.data.settings import SHARED_KEYS, DataSettings
        from rpbench.eval.benchmarks import BENCHMARKS
        from rpbench.export.hub import HubSettings
        from rpbench.models.config_tree import model_entries
        from rpbench.models.settings import ModelSettings
        from rpbench.objectives.conversation_env import ConversationEnvSettings
        from rpbench.objectives.registry import OBJECTIVES
        from rpbench.probes.stage import PROBES
        from rpbench.scoring.chat.client import EndpointSettings
        from rpbench.serve.settings import ServeSettings
        from rpbench.synth.config import SynthSettings

        found = [("model", name, group_values("model", name, "model"), ModelSettings) for name in model_entries()]
        for option in options_of("data"):
            values = group_values("data", option, "data")
            found.append(("data", option, {k: v for k, v in values.items() if k in SHARED_KEYS}, DataSettings))
            own = {k: v for k, v in values.items() if k not in SHARED_KEYS}
            found.append(("data", f"{option} (options)", own, FORMATS.get(values["format"]).options))
        for group, registry, attribute in (
            ("objective", OBJECTIVES, "config_class"),
            ("evaluator", BENCHMARKS, "settings_class"),
        ):
            for option in registry.names():
                cls = getattr(registry.get(option), attribute)
                found.append((group, option, group_values(group, option, group), cls))
        for option in (o for o in options_of("judge") if o != "none"):
            found.append(("judge", option, group_values("judge", option, "judge"), EndpointSettings))
        for option in options_of("probe"):
            found.append(("probe", option, group_values("probe", option, "probe"), PROBES.get(option).settings_class))
        for option in options_of("synth"):
            found.append(("synth", option, group_values("synth", option, "synth"), SynthSettings))
        for option in (o for o in options_of("env") if o != "none"):  # env=none: GRPO reads its name alone
            found.append(("env", option, group_values("env", option, "env"), ConversationEnvSettings))
        for option in options_of("serve"):
            found.append(("serve", option, group_values("serve", option, "serve"), ServeSettings))
        found.append(("export.hub", "default", run_values("export.hub"), HubSettings))
        return found

    return group_settings


@pytest.mark.slow
def test_every_key_of_every_typed_group_is_read(group_settings):
    """The other half of one default per setting: a key the YAML sets and no settings field reads would be a
    setting that silently does nothing. Rewards: each entry's kwargs are the reward's parameters."""
    from rpbench.scoring.rewards import reward_problems

    checked = group_settings()
    groups = {"model", "data", "objective", "evaluator", "judge", "probe", "synth", "env", "export.hub", "serve"}
    assert {group for group, *_ in checked} == groups and len(checked) > 80
    unread = [key for group, option, values, cls in checked for key in unread_keys(values, cls, f"{group}={option}")]
    assert unread == []
    objectives = {option: values for group, option, values, _ in checked if group == "objective"}
    for option, key in (("grpo", "rewards"), ("corl", "reasoner_rewards"), ("corl", "dialogue_rewards")):
        assert reward_problems(objectives[option][key], f"objective.{key}") == []


@pytest.mark.slow
def test_every_model_entry_parses_to_its_typed_settings():
    """The model group is typed too: each conf/model entry parses (an unknown key would be refused), and the
    values the loaders once defaulted in code come from the YAML."""
    from rpbench.models.config_tree import compose_model_config, model_entries
    from rpbench.models.settings import LoraSettings, ModelSettings

    entries = {name: compose_model_config(name) for name in model_entries()}
    assert len(entries) > 20 and all(isinstance(m, ModelSettings) for m in entries.values())
    assert entries["qwen2.5-7b"].dtype == "bfloat16" and entries["tiny-qwen2"].dtype == "float32"
    assert entries["tiny-qwen2"].init_seed == 0 and entries["qwen2.5-7b"].init_seed is None
    with pytest.raises(ConfigError, match=r"model\.lora\.alpha: missing"):
        compose_model_config("tiny-qwen2", ["model.lora={r: 4, dropout: 0.0, target_modules: null}"])
    with pytest.raises(ConfigError, match=r"model\.lora\.r=0: expected an integer rank >= 1"):
        compose_model_config("tiny-qwen2", ["model.lora={r: 0, alpha: 8, dropout: 0.0, target_modules: null}"])
    lora = compose_model_config("qwen3-4b", ["model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: null}"]).lora
    assert lora == LoraSettings(r=4, alpha=8.0, dropout=0.0, target_modules=None)


def test_a_key_read_nowhere_is_found(group_values):
    from rpbench.scoring.chat.client import EndpointSettings

    values = {**group_values("judge", "openai", "judge"), "retries": 3, "budget": {"usd": 1, "tokens": None}}
    assert unread_keys(values, EndpointSettings, "judge") == ["judge.retries"]
    assert unread_keys({"a": {"b": 1}}, Outer, "x") == ["x.a"]
    assert unread_keys({"inner": {"share": 1, "more": 2}}, Outer, "x") == ["x.inner.more"]


def test_missing_test_images_are_named_before_anything_loads(compose, tmp_path):
    """A vision-language model would see the test images: one missing is named (file, record, field) at
    startup, not a traceback once the model generates."""
    from omegaconf import open_dict

    from rpbench.pipeline import run

    cfg = compose("data=sample_mmrole", "model=tiny-qwen2-vl", "objective=none", f"data.image_root={tmp_path}")
    with open_dict(cfg):
        del cfg["hydra"]
    with pytest.raises(DataFormatError) as error:
        run(validate(cfg))
    assert str(error.value).startswith("data.files.test=") and "field 'image': image '" in str(error.value)
    assert "does not exist" in str(error.value)
    assert not (Path(cfg.paths.output_dir) / "predictions.jsonl").exists()


def test_every_key_of_the_run_s_own_groups_is_read(default_config, group_values):
    """The logger options, ``export`` and ``prompts`` and the keys at the top of the run config are typed too:
    a key no field reads would be a setting that silently does nothing."""
    from rpbench.data.templates import PromptSettings
    from rpbench.loggers import LOGGERS
    from rpbench.training.settings import ExportSettings, RunSettings

    loggers = sorted(p.stem for p in (CONF_DIR / "logger").glob("*.yaml"))
    assert loggers == LOGGERS.names()
    unread = [
        key
        for option in loggers
        for key in unread_keys(group_values("logger", option, "logger"), LOGGERS.get(option).settings_class, option)
    ]
    values = OmegaConf.to_container(default_config, resolve=False)
    unread += unread_keys(values["export"], ExportSettings, "export") + unread_keys(
        values["prompts"], PromptSettings, "prompts"
    )
    assert unread == []
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()} | {"hydra", "paths", "export", "prompts"}
    entry_keys = {"task", "plugins", "sweep_name"}  # read by run.py / validate before any settings
    top = {key for key in values if key not in groups and key not in entry_keys}
    assert top == {field.name for field in dataclasses.fields(RunSettings)}
