"""Every option of every config group composes, alone and inside the example experiment."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rpbench.core.paths import CONF_DIR

SKIP_GROUPS = {"hydra", "tuning"}  # hydra/launcher is checked on its own; tuning is chosen automatically


def group_options():
    for group in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in SKIP_GROUPS):
        for option in sorted(group.glob("*.yaml")):
            yield group.name, option.stem


OPTIONS = list(group_options())


def leaves(node, prefix=()):
    """(path, value) of every scalar or list in a nested mapping."""
    for key, value in node.items():
        if isinstance(value, dict):
            yield from leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def file_content(path) -> dict:
    """A config file's settings, read without Hydra: its own merged over those of the files of its folder that
    its defaults list names (e.g. tuning/tiny/kto.yaml: dpo), and of its subgroups' options placed at its own
    level (e.g. evaluator/rpgbench.yaml's ``decoding: <option>``, files with the evaluator's package)."""
    content = OmegaConf.load(path) if path.is_file() else OmegaConf.create()
    named = [path.parent / name for entry in content.pop("defaults", []) for name in _default_files(entry)]
    inherited = [file_content(file) for file in named if file.is_file()]
    return OmegaConf.to_container(OmegaConf.merge(*inherited, content), resolve=False)


def _default_files(entry) -> list[str]:
    """The files of a defaults-list entry relative to its folder: a name, or a subgroup's option."""
    if isinstance(entry, str):
        return [f"{entry}.yaml"]
    return [f"{group}/{option}.yaml" for group, option in entry.items() if "@" not in group and option]


def file_values(path) -> dict:
    """The leaves of ``file_content`` (no interpolations)."""
    return {p: v for p, v in leaves(file_content(path)) if not (isinstance(v, str) and "${" in v)}


def tuning_file(cfg):
    """The objective settings the model's tuning sets (tiny models: tuning/tiny/<objective>.yaml)."""
    tiny = (CONF_DIR / "tuning" / f"{cfg.model.name}.yaml").is_file()
    return CONF_DIR / "tuning" / "tiny" / f"{cfg.objective.name}.yaml" if tiny else CONF_DIR / "absent.yaml"


def tiny_eval_file(cfg):
    """The evaluator settings the tiny model's tuning sets (tuning/tiny_eval/<evaluator>.yaml)."""
    tiny = (CONF_DIR / "tuning" / f"{cfg.model.name}.yaml").is_file()
    return CONF_DIR / "tuning" / "tiny_eval" / f"{cfg.evaluator.name}.yaml" if tiny else CONF_DIR / "absent.yaml"


def later_files(cfg, group: str) -> list:
    """The tuning files composed after ``group``'s option (the tiny default model's)."""
    return {"objective": [tuning_file(cfg)], "evaluator": [tiny_eval_file(cfg)]}.get(group, [])


def assert_option_in_effect(cfg, group: str, option: str, *later_files) -> None:
    """Every value the option's file sets is in the composed config, unless a later file (tuning,
    experiment) sets the same key."""
    global_package = (CONF_DIR / group / f"{option}.yaml").read_text().startswith("# @package _global_")
    composed = dict(leaves(OmegaConf.to_container(cfg if global_package else cfg[group], resolve=False)))
    overridden = {p for f in later_files for p in file_values(f)}
    expected = {p: v for p, v in file_values(CONF_DIR / group / f"{option}.yaml").items() if p not in overridden}
    assert expected, f"{group}/{option}.yaml sets nothing to check"
    assert {p: composed.get(p) for p in expected} == expected


@pytest.mark.slow
@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(compose, group, option, check_config):
    if group == "experiment":
        cfg = compose(f"experiment={option}")
        check_config(cfg)
        assert cfg.run_name == OmegaConf.load(CONF_DIR / "experiment" / f"{option}.yaml").run_name
        return
    cfg = compose(f"{group}={option}")
    check_config(cfg)
    assert_option_in_effect(cfg, group, option, *later_files(cfg, group))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("group", "option"),
    [o for o in OPTIONS if o[0] != "experiment"],
    ids=[f"{g}={o}" for g, o in OPTIONS if g != "experiment"],
)
def test_every_option_composes_inside_the_experiment(compose, group, option, tmp_path, check_config):
    cfg = compose("experiment=rolemrc_sft_qwen2.5-7b", f"{group}={option}")
    check_config(cfg)
    experiment = tmp_path / "experiment_part.yaml"
    OmegaConf.save(OmegaConf.load(CONF_DIR / "experiment" / "rolemrc_sft_qwen2.5-7b.yaml").get(group) or {}, experiment)
    assert_option_in_effect(cfg, group, option, experiment, *later_files(cfg, group))


def test_slurm_launcher_composes(compose):
    cfg = compose("hydra/launcher=slurm", "trainer=gpu", "trainer.devices=8")
    assert (cfg.hydra.launcher.gpus_per_node, cfg.hydra.launcher.tasks_per_node, cfg.hydra.launcher.nodes) == (8, 8, 1)
    assert "submitit" in cfg.hydra.launcher._target_.lower()


@pytest.mark.slow
def test_tiny_models_get_their_tuning_and_real_models_the_paper_defaults(compose):
    assert compose().objective.lr == pytest.approx(5e-3)
    assert compose("model=tiny-llama", "objective=dpo").objective.lr == pytest.approx(1e-3)
    assert compose("model=tiny-llama", "objective=dpo", "objective.lr=0.5").objective.lr == pytest.approx(0.5)
    assert compose("model=tiny-qwen2", "objective=grpo").objective.num_generations == 4
    assert compose("model=tiny-qwen2", "objective=none").objective.name == "none"
    assert compose("model=qwen2.5-7b").objective.lr == pytest.approx(1e-5)
    assert compose("model=qwen2.5-7b").objective.warmup_ratio == pytest.approx(0.04)


def test_every_data_file_is_overridable_from_the_command_line(compose):
    for data in ("sample", "rolemrc", "rolemrc_mix", "mmrole", "rpgbench"):
        cfg = compose(
            f"data={data}", "data.files.train=my.jsonl", "data.files.pairs=p.jsonl", "data.files.test=t.jsonl"
        )
        assert (cfg.data.files.train, cfg.data.files.pairs, cfg.data.files.test) == ("my.jsonl", "p.jsonl", "t.jsonl")


def test_mmrole_agent_experiment_has_the_papers_settings(compose):
    """MMRole finetune/finetune_ds.sh: lr 1e-5, 3 epochs, 8 x 4 on 8 GPUs, wd 0.05, beta2 0.95, warmup 0.01,
    cosine, max length 3072, vision frozen, bf16, gradient checkpointing, ZeRO-3."""
    cfg = compose("experiment=mmrole_agent")
    o = cfg.objective
    assert (o.name, o.lr, o.epochs, o.batch_size, o.grad_accum, o.weight_decay) == ("sft", 1e-5, 3, 8, 4, 0.05)
    assert (list(o.adam_betas), o.warmup_ratio, o.scheduler) == ([0.9, 0.95], 0.01, "cosine")
    trainer = cfg.trainer
    assert (trainer.devices, trainer.precision, trainer.strategy.config.zero_optimization.stage) == (8, "bf16-mixed", 3)
    model = cfg.model
    assert (model.name_or_path, model.family, model.freeze_vision) == ("Qwen/Qwen2-VL-7B-Instruct", "qwen2_vl", True)
    assert (model.dtype, model.gradient_checkpointing) == ("bfloat16", True)
    data = cfg.data
    assert (data.name, data.max_length, data.per_turn_samples) == ("mmrole", 3072, True)
    assert list(data.files.test) == ["in", "out"]
    assert data.default_system.startswith("You are a role-playing assistant")
    assert (cfg.evaluator.name, cfg.evaluator.without_vision) == ("mmrole", False)
    assert cfg.run_name == "mmrole-agent-qwen2-vl-7b"
