"""Ctrl-C during training: the run stops after the optimizer step under way with checkpoints/last.ckpt holding
it, exits 130 and prints the command that resumes it; that command continues the run to the losses of an
uninterrupted one. A second Ctrl-C stops at once; a crash after a checkpoint prints the command too.

The interrupted runs get SIGINT from ``conftest.InterruptDuringStep``, a Trainer callback that signals its own
process as Ctrl-C does (a `python run.py` subprocess, or the test's own process for an in-process run)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys

import pytest
import torch

# 24 records -> 21 training samples in 11 micro-batches of 2, two accumulated per optimizer step: 6 steps.
TRAINING = [
    "evaluator=none",
    "trainer.enable_progress_bar=false",
    "data.max_train_samples=24",
    "objective.epochs=1",
    "objective.batch_size=2",
    "objective.grad_accum=2",
    "objective.log_every_n_steps=1",
    "checkpoint_every_n_steps=null",  # no step checkpoints: the interrupt writes the one there is
    "save_model=false",
]
TOTAL_STEPS, INTERRUPTED_STEP = 6, 3
INTERRUPT = f"+trainer.callbacks=[{{_target_: conftest.InterruptDuringStep, step: {INTERRUPTED_STEP}}}]"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, run_in_process):
    """The folder of a run of TRAINING that nothing interrupted."""
    out = tmp_path_factory.mktemp("uninterrupted")
    run_in_process(out, *TRAINING)
    return out


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_step_under_way_and_the_printed_command_resumes_to_the_uninterrupted_run(
    tmp_path, repo_root, offline_env, uninterrupted, checkpoint_step, logged_losses
):
    out = tmp_path / "run"
    env = {
        **os.environ,
        **offline_env,
        "PYTHONPATH": str(repo_root / "tests"),  # conftest.InterruptDuringStep
        "OMP_NUM_THREADS": str(torch.get_num_threads()),  # the in-process run's floating-point sums
    }
    arguments = [f"hydra.run.dir={out}", *TRAINING, INTERRUPT]
    interrupted = subprocess.run(
        [sys.executable, "run.py", *arguments], cwd=repo_root, env=env, capture_output=True, text=True, check=False
    )
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    checkpoint = out / "checkpoints" / "last.ckpt"
    # SIGINT came as step 3's first micro-batch started: step 3 was finished, then written
    assert checkpoint_step(checkpoint) == INTERRUPTED_STEP
    assert not (out / "metrics.json").exists()
    *_, said, command = interrupted.stderr.strip().splitlines()
    assert said == f"interrupted; the checkpoint {checkpoint} (optimizer step {INTERRUPTED_STEP}) resumes with:"
    assert shlex.split(command) == ["python", "run.py", *TRAINING, INTERRUPT, f"hydra.run.dir={out}"]

    resumed = subprocess.run(  # the printed command, with this Python
        [sys.executable, *shlex.split(command)[1:]], cwd=repo_root, env=env, capture_output=True, text=True, check=False
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Restoring states from the checkpoint" in resumed.stdout + resumed.stderr
    expected = json.loads((uninterrupted / "metrics.json").read_text())
    got = json.loads((out / "metrics.json").read_text())
    assert got["train"]["optimizer_steps"] == expected["train"]["optimizer_steps"] == TOTAL_STEPS
    assert got["train"]["held_out"]["before"] == expected["train"]["held_out"]["before"]
    assert got["train"]["held_out"]["after"]["loss"] == pytest.approx(
        expected["train"]["held_out"]["after"]["loss"], rel=1e-5
    )
    # the resumed run trained steps 4 to 6 alone, each with the uninterrupted run's loss
    assert logged_losses(out) == pytest.approx(logged_losses(uninterrupted)[INTERRUPTED_STEP:], rel=1e-5, abs=1e-6)
    assert got["short_run"] is None and not (out / "error.txt").exists()


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_keeping_the_last_checkpoint(tmp_path, run_in_process, checkpoint_step):
    """Two SIGINTs as step 4 starts: the second stops training there, the checkpoint of step 2 kept."""
    twice = "+trainer.callbacks=[{_target_: conftest.InterruptDuringStep, step: 4, times: 2}]"
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as stopped:
        run_in_process(tmp_path, *TRAINING, "objective.grad_accum=1", "checkpoint_every_n_steps=2", twice)
    assert str(stopped.value) == "training interrupted: last.ckpt holds optimizer step 2"
    assert checkpoint_step(tmp_path / "checkpoints" / "last.ckpt") == 2
    assert signal.getsignal(signal.SIGINT) is before  # Lightning's SIG_IGN is undone


@pytest.mark.slow
def test_a_crash_after_a_checkpoint_prints_the_command_that_resumes_it(tmp_path, run_script, repo_root):
    out = tmp_path / "run"
    kill = "+trainer.callbacks=[{_target_: conftest.KillAfterStep, step: 2}]"
    overrides = [*TRAINING, "objective.grad_accum=1", "checkpoint_every_n_steps=1", kill]
    result = run_script("run.py", f"hydra.run.dir={out}", *overrides, PYTHONPATH=str(repo_root / "tests"))
    assert result.returncode == 1 and "SimulatedKill: killed after step 2" in result.stderr
    *_, said, command = result.stderr.strip().splitlines()
    assert said == f"the run crashed (SimulatedKill); the checkpoint {out / 'checkpoints' / 'last.ckpt'} resumes with:"
    assert shlex.split(command) == ["python", "run.py", *overrides, f"hydra.run.dir={out}"]
