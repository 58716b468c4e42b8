"""logger=tensorboard and logger=mlflow: what a short run records, read back with each tool's own reader; a
logger whose package is absent stops the run at startup, naming the extra to install."""

from __future__ import annotations

import json
import sys

import pytest

from rpbench.core.errors import ConfigError
from rpbench.validate import validate


@pytest.mark.slow
def test_tensorboard_records_the_training_loss_and_the_test_metrics(tmp_path, run_in_process, short_training):
    pytest.importorskip("tensorboard", reason="logger=tensorboard needs pip install -e '.[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    run_in_process(
        out,
        *short_training,
        "logger=tensorboard",
        "data.max_test_samples=2",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.metrics=[bleu]",
    )
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    steps = json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"]
    losses = events.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(steps)) and all(e.value > 0 for e in losses)
    assert "eval/bleu" in events.Tags()["scalars"] and "hp_metric" not in events.Tags()["scalars"]


@pytest.mark.slow
def test_mlflow_records_a_finished_run_with_its_config_metrics_and_results(
    tmp_path, monkeypatch, run_in_process, short_training
):
    pytest.importorskip("mlflow", reason="logger=mlflow needs pip install -e '.[mlflow]'")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the default: a file store in the run folder
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # which the run allows itself

    out = tmp_path / "run"
    results = run_in_process(out, *short_training, "logger=mlflow", "evaluator=none")
    client = MlflowClient(tracking_uri=f"file:{out / 'mlruns'}")
    (run,) = client.search_runs([client.get_experiment_by_name("rpbench").experiment_id])
    assert run.info.run_name == results["run_name"] and run.info.status == "FINISHED"
    losses = client.get_metric_history(run.info.run_id, "train/loss")
    assert len(losses) == results["train"]["optimizer_steps"] and "val/loss" in run.data.metrics
    assert run.data.params["objective/name"] == "sft" and run.data.params["seed"] == "42"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.json", "report.md", "config.yaml"} <= artifacts


@pytest.mark.parametrize("logger", ["tensorboard", "mlflow"])
def test_a_logger_whose_package_is_absent_is_refused_at_startup_naming_its_extra(compose, monkeypatch, logger):
    cfg = compose(f"logger={logger}")
    monkeypatch.delitem(sys.modules, logger, raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (p.endswith("site-packages") or p.endswith(".egg"))])
    with pytest.raises(ConfigError, match=rf"logger={logger}: .* pip install -e '\.\[{logger}\]'"):
        validate(cfg)
