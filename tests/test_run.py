"""`python run.py` end to end: in a subprocess where the process itself is tested (the command line, DDP's
launch), otherwise what it runs, in-process (``run_in_process``)."""

from __future__ import annotations

import csv
import json
import logging

import pytest
import yaml

from rpbench.core.errors import ConfigError


@pytest.mark.slow
def test_default_run_trains_evaluates_and_reports_held_out_loss(
    tmp_path, run_in_process, repo_root, short_training, small_eval
):
    out = tmp_path / "run"
    run_in_process(out, *short_training, *small_eval)
    metrics = json.loads((out / "metrics.json").read_text())
    held_out = metrics["train"]["held_out"]
    assert held_out["after"]["loss"] < held_out["before"]["loss"]
    assert metrics["records"]["train"]["read"] == 48 and metrics["records"]["train_test_overlap"] == 0
    report = (out / "report.md").read_text()
    assert f"{held_out['after']['loss']:.4f}" in report and f"{held_out['before']['loss']:.4f}" in report
    assert yaml.safe_load((out / "config.yaml").read_text())["objective"]["name"] == "sft"
    assert (out / "model" / "config.json").exists()
    columns = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "val/loss"} <= set(columns)
    for name in ("metrics.json", "report.md", "scores.jsonl", "predictions.jsonl"):  # results name no machine path
        text = (out / name).read_text()
        assert str(out.resolve()) not in text and str(repo_root) not in text, name
    assert json.loads((out / "metrics.json").read_text())["eval"]["generation"]["path"] == "predictions.jsonl"


@pytest.mark.slow
def test_rerun_in_the_same_folder_resumes_from_the_last_checkpoint(tmp_path, caplog, run_in_process, fast):
    out = tmp_path / "run"
    run_in_process(out, *fast)
    steps = json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"]
    first_curve = (out / "metrics.csv").read_text()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run_in_process(out, *fast, "objective.epochs=2")
    assert "Restoring states from the checkpoint" in caplog.text
    assert json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == 2 * steps
    assert (out / "metrics.1.csv").read_text() == first_curve  # the resumed run kept the earlier curve
    logged_steps = [int(row["step"]) for row in csv.DictReader((out / "metrics.csv").open())]
    assert min(logged_steps) >= steps - 1 and max(logged_steps) == 2 * steps - 1  # only the resumed epoch


@pytest.mark.slow
def test_rerun_with_other_training_settings_stops_naming_them_unless_forced(tmp_path, run_in_process, fast):
    out = tmp_path / "run"
    run_in_process(out, *fast)
    finished = {name: (out / name).read_bytes() for name in ("metrics.json", "config.yaml", "checkpoints/last.ckpt")}
    other = ["objective.lr=1e-3", "data.max_train_samples=40"]
    with pytest.raises(ConfigError) as refused:
        run_in_process(out, *fast, *other)
    message = str(refused.value)
    assert "objective.lr: 0.005 -> 0.001" in message and "data.max_train_samples: 48 -> 40" in message
    assert "hydra.run.dir=<new folder>" in message and "resume=force" in message
    assert {name: (out / name).read_bytes() for name in finished} == finished  # the refused run changed nothing

    (out / "checkpoints" / "training_config.json").unlink()  # a checkpoint that cannot tell what it was written with
    with pytest.raises(ConfigError, match="no record of the settings it was written with"):
        run_in_process(out, *fast)

    forced = run_in_process(out, *fast, *other, "objective.epochs=2", "resume=force")
    assert any(w.startswith("resume=force: resumed") for w in forced["warnings"])
    assert forced["train"]["optimizer_steps"] > json.loads(finished["metrics.json"])["train"]["optimizer_steps"]
    # settings that only watch the run may change; the forced run's settings are the checkpoint's now
    watched = run_in_process(out, *fast, *other, "objective.epochs=2", "objective.log_every_n_steps=2")
    assert "warnings" not in watched and watched["train"]["optimizer_steps"] == forced["train"]["optimizer_steps"]


@pytest.mark.slow
def test_a_training_file_replaced_at_its_path_is_not_resumed_and_forcing_keeps_the_history(
    tmp_path, run_in_process, fast
):
    from rpbench.data.files import package_path

    train = tmp_path / "train.jsonl"
    lines = package_path("pkg://rpbench/resources/sample/rolemrc/train-sft.jsonl").read_text().splitlines(True)
    train.write_text("".join(lines))
    out, data = tmp_path / "run", f"data.files.train={train}"
    run_in_process(out, *fast, data)
    stored = (out / "checkpoints" / "training_config.json").read_text()
    train.write_text("".join(reversed(lines)))  # other records at the same path
    with pytest.raises(ConfigError, match=r"data\.records_sha256\.train: '[0-9a-f]{64}' -> '[0-9a-f]{64}'"):
        run_in_process(out, *fast, data)

    run_in_process(out, *fast, data, "resume=force")
    assert (out / "checkpoints" / "training_config.1.json").read_text() == stored  # the forced run kept it

    (out / "checkpoints" / "training_config.json").write_text('{"seed": 1')  # cut off
    with pytest.raises(ConfigError, match=r"training_config\.json: the record of the settings .* unreadable"):
        run_in_process(out, *fast, data)


def test_cfg_job_prints_the_resolved_config(run):
    result = run("--cfg", "job", "--resolve", "objective=none")  # as docs/configuration.md shows it
    assert result.returncode == 0, result.stderr[-2000:]
    assert "${" not in result.stdout
    cfg = yaml.safe_load(result.stdout)
    assert cfg["model"]["name_or_path"] == "tiny:qwen2" and cfg["objective"]["name"] == "none"


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_trains_and_evaluates_in_step(ddp_run):
    """Two gloo ranks: each runs its share of every optimizer step, generation is sharded and merged."""
    metrics = json.loads((ddp_run / "metrics.json").read_text())
    train = metrics["train"]
    per_step = 4 * 2 * 2  # batch x grad_accum x ranks
    assert train["optimizer_steps"] == -(-train["samples"]["train"] // per_step)
    assert train["held_out"]["after"]["loss"] < train["held_out"]["before"]["loss"]
    ids = [json.loads(line)["id"] for line in (ddp_run / "predictions.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 8 and metrics["eval"]["metrics"]["overall"]["rougeL"]["n"] == 8
