"""Training killed with SIGKILL resumes in its folder to the state of an uninterrupted run.

The killed run is `python run.py` in a subprocess; the uninterrupted run (shared by the tests, which only
read it) and the reruns are what run.py runs, in-process (``run_in_process``)."""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rpbench.core.errors import ConfigError

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


def losses(run: Path) -> dict[int, float]:
    """train/loss per logged step of the run's latest metrics.csv."""
    rows = csv.DictReader((run / "metrics.csv").open())
    return {int(r["step"]): float(r["train/loss"]) for r in rows if r["train/loss"]}


@pytest.fixture(scope="module")
def run_killed_midway(repo_root, offline_env, checkpoint_step):
    """Start `python run.py`, SIGKILL it once last.ckpt has passed KILL_AFTER_STEP; the step it resumes from."""

    def run_killed_midway(out: Path) -> int:
        ckpt = out / "checkpoints" / "last.ckpt"
        process = subprocess.Popen(
            [sys.executable, "run.py", f"hydra.run.dir={out}", *TRAINING],
            cwd=repo_root,
            # the thread count of the in-process runs it is compared with: the same floating-point sums
            env={**os.environ, **offline_env, "OMP_NUM_THREADS": str(torch.get_num_threads())},
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

    return run_killed_midway


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, run_in_process) -> Path:
    """The folder of a run of TRAINING that nothing interrupted."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    run_in_process(out, *TRAINING)
    return out


@pytest.mark.slow
def test_a_run_killed_mid_epoch_resumes_to_the_same_steps_losses_and_weights(
    uninterrupted, tmp_path, caplog, run_in_process, run_killed_midway
):
    reference, resumed = uninterrupted, tmp_path / "resumed"
    resume_step = run_killed_midway(resumed)
    assert not (resumed / "metrics.json").exists()  # it really died in training
    assert KILL_AFTER_STEP <= resume_step < TOTAL_STEPS and resume_step % STEPS_PER_EPOCH != 0
    with caplog.at_level(logging.INFO):
        run_in_process(resumed, *TRAINING)
    assert "Restoring states from the checkpoint" in caplog.text

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
def test_rerunning_a_finished_folder_keeps_its_before_and_after(uninterrupted, tmp_path, run_in_process):
    out = shutil.copytree(uninterrupted, tmp_path / "run")
    before = json.loads((out / "metrics.json").read_text())["train"]
    run_in_process(out, *TRAINING)
    after = json.loads((out / "metrics.json").read_text())["train"]
    assert after["held_out"] == before["held_out"] and after["optimizer_steps"] == before["optimizer_steps"]
    assert before["held_out"]["before"]["loss"] > before["held_out"]["after"]["loss"]


# 16 records -> 14 training samples in 7 micro-batches of 2 per epoch; the schedule's lr does not depend on its length.
CONTINUED = [
    "evaluator=none",
    "trainer.enable_progress_bar=false",
    "data.max_train_samples=16",
    "objective.epochs=2",
    "objective.batch_size=2",
    "objective.grad_accum=1",
    "objective.log_every_n_steps=1",
    "objective.scheduler=constant",
    "objective.warmup_ratio=0",
    "checkpoint_every_n_steps=null",
]


@pytest.mark.slow
def test_a_run_stopped_on_max_steps_continues_to_a_larger_one_as_if_uninterrupted(tmp_path, run_in_process):
    reference, continued = tmp_path / "reference", tmp_path / "continued"
    run_in_process(reference, *CONTINUED, "trainer.max_steps=10")  # into the second epoch
    first = run_in_process(continued, *CONTINUED, "trainer.max_steps=4")  # stops mid-epoch
    assert first["train"]["optimizer_steps"] == 4
    again = run_in_process(continued, *CONTINUED, "trainer.max_steps=4")["train"]  # finished: nothing more trains
    assert again["optimizer_steps"] == 4 and again["held_out"] == first["train"]["held_out"]
    with pytest.raises(ConfigError, match=r"trainer\.max_steps: 4 -> 3; trainer\.max_steps may grow .* not shrink"):
        run_in_process(continued, *CONTINUED, "trainer.max_steps=3")

    expected = json.loads((reference / "metrics.json").read_text())["train"]
    got = run_in_process(continued, *CONTINUED, "trainer.max_steps=10")["train"]
    assert got["optimizer_steps"] == expected["optimizer_steps"] == 10
    assert got["held_out"]["before"] == expected["held_out"]["before"]
    assert got["held_out"]["after"]["loss"] == pytest.approx(expected["held_out"]["after"]["loss"], rel=1e-5)
    reference_losses, continued_losses = losses(reference), losses(continued)
    assert sorted(continued_losses) == list(range(4, 10))  # the steps after the first run's, each once
    for step, loss in continued_losses.items():
        assert loss == pytest.approx(reference_losses[step], rel=1e-5, abs=1e-6), f"step {step}"
    weights = load_file(reference / "model" / "model.safetensors")
    for name, tensor in load_file(continued / "model" / "model.safetensors").items():
        torch.testing.assert_close(tensor, weights[name], rtol=1e-5, atol=1e-6)
