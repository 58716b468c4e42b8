"""logger=wandb offline: what the W&B run records (read back from its files) and how runs are grouped."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from rpbench.loggers import WandbSettings, wandb_group, wandb_job_type


def wandb_settings(cfg, **changes) -> WandbSettings:
    return WandbSettings.parse({**OmegaConf.to_container(cfg.logger), **changes}, "logger")


@pytest.mark.parametrize(
    ("overrides", "job_type"),
    [((), "train"), (("objective=none",), "eval"), (("objective=none", "probe=topk_freq"), "probe")],
)
def test_job_type_follows_the_run(compose, overrides, job_type):
    cfg = compose("logger=wandb", *overrides)
    assert wandb_job_type(wandb_settings(cfg), OmegaConf.to_container(cfg, resolve=False)) == job_type
    assert wandb_job_type(wandb_settings(cfg, job_type="mine"), {}) == "mine"


def test_group_is_the_experiment_of_a_single_run_or_the_configured_one(compose):
    cfg = compose("logger=wandb", "experiment=rolemrc_sft_qwen2.5-7b")
    config = OmegaConf.to_container(cfg, resolve=False)
    assert wandb_group(wandb_settings(cfg), config) == "rolemrc_sft_qwen2.5-7b"
    assert wandb_group(wandb_settings(cfg, group="ablation"), config) == "ablation"
    assert wandb_group(wandb_settings(compose("logger=wandb")), config) is None


@pytest.mark.slow
def test_an_evaluation_run_records_its_type_tags_table_and_report_offline(
    tmp_path, monkeypatch, run_in_process, run_records
):
    """What run.py runs, in-process."""
    out = tmp_path / "run"
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_in_process(
        out,
        "objective=none",
        "logger=wandb",
        "logger.tags=[baseline,tiny]",
        "data.max_test_samples=2",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.metrics=[bleu]",
    )
    (run,) = run_records(out / "wandb")
    assert run == {
        "id": (out / "wandb_run_id.txt").read_text().strip(),
        "name": "none-tiny-qwen2-sample",
        "group": "",
        "job_type": "eval",
        "tags": ["baseline", "tiny"],
        "exit_code": 0,  # finished by the job
    }
    (files,) = out.glob("wandb/offline-run-*/files")
    assert (files / "report.md").read_text() == (out / "report.md").read_text()
    assert json.loads((files / "metrics.json").read_text()) == json.loads((out / "metrics.json").read_text())
    (table,) = files.glob("media/table/eval/predictions_*.table.json")
    content = json.loads(table.read_text())
    assert content["columns"][:4] == ["id", "task", "prompt", "prediction"] and len(content["data"]) == 2
