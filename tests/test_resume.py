"""Training killed with SIGKILL resumes in its folder to the state of an uninterrupted run."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import OFFLINE_ENV, REPO_ROOT, run_script

# 96 records -> 86 training samples in 43 micro-batches of 2 per epoch, one optimizer step each: 86 steps.
TRAINING = [
    "evaluator=none",
    "trainer.enable_progress_bar=false",
    "data.max_train_samples=96",
    "objective.epochs=2",
    "objective.batch_size=2",
    "objective.grad_accum=1",
    "objective.log_every_n_steps=1",
    "checkpoint_every_n_steps=4",
]
STEPS_PER_EPOCH, TOTAL_STEPS = 43, 86
KILL_AFTER_STEP = 48  # checkpoints at 48, 52, ... lie inside the second epoch


def checkpoint_step(path: Path) -> int | None:
    """The optimizer step of a (whole) checkpoint file, None when there is none yet."""
    if not path.exists():
        return None
    return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])


def losses(run: Path) -> dict[int, float]:
    """train/loss per logged step of the run's latest metrics.csv."""
    rows = csv.DictReader((run / "metrics.csv").open())
    return {int(r["step"]): float(r["train/loss"]) for r in rows if r["train/loss"]}


def run_killed_midway(out: Path) -> int:
    """Start `python run.py`, SIGKILL it once last.ckpt has passed KILL_AFTER_STEP; the step it resumes from."""
    ckpt = out / "checkpoints" / "last.ckpt"
    process = subprocess.Popen(
        [sys.executable, "run.py", f"hydra.run.dir={out}", *TRAINING],
        cwd=REPO_ROOT,
        env={**os.environ, **OFFLINE_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while (checkpoint_step(ckpt) or 0) < KILL_AFTER_STEP:
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint past the kill step in 300 s"
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    return checkpoint_step(ckpt)


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_to_the_same_steps_losses_and_weights(tmp_path):
    reference, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    first = run_script("run.py", f"hydra.run.dir={reference}", *TRAINING)
    assert first.returncode == 0, first.stderr[-3000:]

    resume_step = run_killed_midway(resumed)
    assert not (resumed / "metrics.json").exists()  # it really died in training
    assert KILL_AFTER_STEP <= resume_step < TOTAL_STEPS and resume_step % STEPS_PER_EPOCH != 0
    second = run_script("run.py", f"hydra.run.dir={resumed}", *TRAINING)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Restoring states from the checkpoint" in second.stdout + second.stderr

    expected = json.loads((reference / "metrics.json").read_text())["train"]
    got = json.loads((resumed / "metrics.json").read_text())["train"]
    assert got["optimizer_steps"] == expected["optimizer_steps"] == TOTAL_STEPS
    # The first run's held-out loss before training, not a pass over the resumed weights.
    assert got["held_out"]["before"] == expected["held_out"]["before"]
    assert got["held_out"]["after"]["loss"] == pytest.approx(expected["held_out"]["after"]["loss"], rel=1e-5)

    reference_losses, resumed_losses = losses(reference), losses(resumed)
    # The resumed run logged exactly the steps after its checkpoint, with the uninterrupted run's losses.
    assert sorted(resumed_losses) == [s for s in sorted(reference_losses) if s >= resume_step]
    for step, loss in resumed_losses.items():
        assert loss == pytest.approx(reference_losses[step], rel=1e-5, abs=1e-6), f"step {step}"

    weights = load_file(reference / "model" / "model.safetensors")
    for name, tensor in load_file(resumed / "model" / "model.safetensors").items():
        torch.testing.assert_close(tensor, weights[name], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_rerunning_a_finished_folder_keeps_its_before_and_after(tmp_path):
    out = tmp_path / "run"
    first = run_script("run.py", f"hydra.run.dir={out}", *TRAINING, "data.max_train_samples=24")
    assert first.returncode == 0, first.stderr[-3000:]
    before = json.loads((out / "metrics.json").read_text())["train"]
    second = run_script("run.py", f"hydra.run.dir={out}", *TRAINING, "data.max_train_samples=24")
    assert second.returncode == 0, second.stderr[-3000:]
    after = json.loads((out / "metrics.json").read_text())["train"]
    assert after["held_out"] == before["held_out"] and after["optimizer_steps"] == before["optimizer_steps"]
    assert before["held_out"]["before"]["loss"] > before["held_out"]["after"]["loss"]
