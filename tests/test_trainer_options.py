"""The trainer group passes Lightning Trainer options through; unknown keys are errors; debug=short.

The runs are `python run.py <overrides>` in-process (``run_in_process``): what run.py hands the pipeline."""

from __future__ import annotations

import csv
import json

import pytest

from rpbench.core.errors import ConfigError
from rpbench.validate import validate

QUIET = ["trainer.enable_progress_bar=false", "evaluator=none"]


@pytest.mark.parametrize(
    ("override", "named", "pointer"),
    [
        ("+trainer.bogus=1", "trainer.bogus", "max_steps"),  # the valid keys are listed
        ("+trainer.max_epochs=2", "trainer.max_epochs", "objective.epochs"),
        ("+objective.max_steps=3", "objective.max_steps", "trainer.max_steps=3"),
    ],
)
def test_a_trainer_key_nothing_reads_is_an_error_naming_it(compose, override, named, pointer):
    with pytest.raises(ConfigError) as error:
        validate(compose(override))
    assert named in str(error.value) and pointer in str(error.value)


def test_objective_and_trainer_validation_intervals_are_not_both_accepted(compose):
    with pytest.raises(ConfigError, match="val_check_interval and objective.val_every_n_steps"):
        validate(compose("trainer.val_check_interval=4", "objective.val_every_n_steps=2"))


def test_trainer_options_compose_without_a_plus(compose):
    cfg = compose("trainer.max_steps=3", "trainer.limit_val_batches=2", "trainer.fast_dev_run=true")
    validate(cfg)
    assert (cfg.trainer.max_steps, cfg.trainer.limit_val_batches, cfg.trainer.fast_dev_run) == (3, 2, True)


@pytest.mark.slow
def test_debug_short_takes_three_steps_and_measures_held_out_loss_after_them(tmp_path, run_in_process):
    out = tmp_path / "run"
    run_in_process(out, "debug=short", *QUIET)
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["run_name"], metrics["short_run"]) == ("sft-tiny-qwen2-sample-short", "debug=short")
    train = metrics["train"]
    assert train["optimizer_steps"] == 3
    before, after = train["held_out"]["before"], train["held_out"]["after"]
    assert (before["step"], after["step"]) == (0, 3)  # re-measured after the last step, not left at step 0
    assert after["loss"] != before["loss"] and after["tokens"] == before["tokens"]
    assert not (out / "model").exists()  # debug=short exports nothing


@pytest.mark.slow
def test_trainer_max_steps_and_a_callback_spec_reach_lightning(tmp_path, run_in_process):
    out = tmp_path / "run"
    run_in_process(
        out,
        "trainer.max_steps=2",
        "+trainer.callbacks=[{_target_:lightning.pytorch.callbacks.LearningRateMonitor}]",
        "objective.log_every_n_steps=1",
        "save_model=false",
        *QUIET,
    )
    train = json.loads((out / "metrics.json").read_text())["train"]
    assert train["optimizer_steps"] == 2 and train["held_out"]["after"]["step"] == 2
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert any(row.get("lr-AdamW/pg1") for row in rows)  # logged by the LearningRateMonitor the spec names


@pytest.mark.slow
def test_debug_fast_dev_run_takes_one_step_and_reports_no_before_after(tmp_path, run_in_process):
    out = tmp_path / "run"
    run_in_process(out, "debug=fast_dev_run", *QUIET)
    train = json.loads((out / "metrics.json").read_text())["train"]
    assert train["optimizer_steps"] == 1
    assert "held_out" not in train  # Lightning's fast_dev_run skips the pass before training: no "before" to report


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks a machine without CUDA")
def test_accelerator_gpu_without_cuda_is_refused_before_loading():
    from rpbench.training.trainer_settings import value_problems

    assert value_problems({"accelerator": "gpu"}) == [
        "trainer.accelerator=gpu: no CUDA device here (use trainer.accelerator=cpu or auto)"
    ]
    assert value_problems({"accelerator": "cpu"}) == []


EPOCH = [*QUIET, "data.max_train_samples=48"]  # 43 training records: 6 micro-batches of 8 (3 steps of 2)


@pytest.mark.parametrize(
    ("override", "refusal"),
    [
        ("trainer.limit_train_batches=0.0001", r"trainer\.limit_train_batches=0\.0001: keeps no training batch"),
        ("trainer.val_check_interval=7", r"trainer\.val_check_interval=7: past the end of the epoch"),
        ("objective.val_every_n_steps=4", r"objective\.val_every_n_steps=4 \(8 micro-batches\): past the end"),
    ],
)
def test_batch_limits_lightning_refuses_stop_the_run_before_the_model_loads(
    tmp_path, override, refusal, run_in_process
):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=refusal + r".*an epoch has at most 6 training micro-batches \(43 records"):
        run_in_process(out, *EPOCH, override)
    assert not (out / "config.yaml").exists()  # refused right after the data was read


@pytest.mark.slow
def test_a_validation_interval_at_the_epoch_end_is_one_lightning_accepts(tmp_path, run_in_process):
    result = run_in_process(tmp_path / "run", *EPOCH, "trainer.val_check_interval=6", "trainer.max_steps=1")
    assert result["train"]["optimizer_steps"] == 1


def test_a_hub_model_missing_from_the_cache_offline_is_refused_before_loading(
    tmp_path, compose, monkeypatch, run_in_process
):
    from huggingface_hub import constants

    from rpbench.validate import check_model_source

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read once, at import
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match=r"model\.name_or_path='Qwen/Qwen2\.5-0\.5B': not a local folder.*HF_HUB_OFF"):
        run_in_process(tmp_path / "run", "model=qwen2.5-0.5b", "objective=none", "data.max_test_samples=2")
    assert not (tmp_path / "run" / "config.yaml").exists()
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    check_model_source(validate(compose("model=qwen2.5-0.5b", "objective=none")))  # in the cache: loads offline


@pytest.mark.parametrize("records", [5, 17, 43, 2001])
def test_a_refused_share_is_one_lightning_refuses_and_the_share_advised_one_it_takes(compose, records):
    import re

    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.trainer.connectors.data_connector import _parse_num_batches
    from lightning.pytorch.trainer.states import RunningStage

    from rpbench.training.trainer_settings import epoch_problems, most_micro_batches

    objective = validate(compose("objective.batch_size=2", "objective.grad_accum=1")).objective
    most = most_micro_batches(objective, records)
    assert most == -(-records // 2)  # one micro-batch per two records, the last one short
    (refusal,) = epoch_problems({"limit_train_batches": 0.5 / most}, objective, records)
    with pytest.raises(MisconfigurationException):
        _parse_num_batches(RunningStage.TRAINING, most, 0.5 / most)
    advised = float(re.search(r"a share of at least ([0-9.]+)", refusal).group(1))
    assert _parse_num_batches(RunningStage.TRAINING, most, advised) >= 1
    assert epoch_problems({"limit_train_batches": advised}, objective, records) == []
