"""Every option of every config group composes, alone and inside the example experiment."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import CONF_DIR
from rpbench.models.loading import DTYPES
from rpbench.training import _strategy

SKIP_GROUPS = {"hydra", "tuning"}  # hydra/launcher is checked on its own; tuning is chosen automatically


def group_options():
    for group in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in SKIP_GROUPS):
        for option in sorted(group.glob("*.yaml")):
            yield group.name, option.stem


OPTIONS = list(group_options())


def check(cfg) -> None:
    resolved = {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in cfg
        if k != "hydra"
    }
    assert resolved["model"]["dtype"] in DTYPES
    assert resolved["objective"]["name"] in {"none", "sft", "dpo", "grpo", "corl"}
    for split in ("train", "pairs", "test"):
        assert split in resolved["data"]["files"], f"data={cfg.data.name} lacks files.{split}"
    _strategy(resolved["trainer"], micro_batch_size=1)


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(compose, group, option):
    if group == "experiment":
        check(compose(f"experiment={option}"))
    else:
        check(compose(f"{group}={option}"))


@pytest.mark.parametrize(
    ("group", "option"),
    [o for o in OPTIONS if o[0] != "experiment"],
    ids=[f"{g}={o}" for g, o in OPTIONS if g != "experiment"],
)
def test_every_option_composes_inside_the_experiment(compose, group, option):
    check(compose("experiment=rolemrc_sft_qwen2.5-7b", f"{group}={option}"))


def test_slurm_launcher_composes(compose):
    cfg = compose("hydra/launcher=slurm")
    assert cfg.hydra.launcher.gpus_per_node == 8
    assert "submitit" in cfg.hydra.launcher._target_.lower()


def test_tiny_models_get_their_tuning_and_real_models_the_paper_defaults(compose):
    assert compose().objective.lr == pytest.approx(5e-3)
    assert compose("model=qwen2.5-7b").objective.lr == pytest.approx(1e-5)
    assert compose("model=qwen2.5-7b").objective.warmup_ratio == pytest.approx(0.04)


def test_every_data_file_is_overridable_from_the_command_line(compose):
    for data in ("sample", "rolemrc", "rolemrc_mix", "mmrole", "rpgbench"):
        cfg = compose(
            f"data={data}", "data.files.train=my.jsonl", "data.files.pairs=p.jsonl", "data.files.test=t.jsonl"
        )
        assert (cfg.data.files.train, cfg.data.files.pairs, cfg.data.files.test) == ("my.jsonl", "p.jsonl", "t.jsonl")
