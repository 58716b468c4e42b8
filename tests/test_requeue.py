"""A preempted job (submitit's USR2) is requeued by submitit and resumes from its last checkpoint in the same
W&B run; simulated on this machine through submitit_local."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SIGNAL_AFTER_STEP = 4


def task_pid(sweep: Path) -> int | None:
    """The job's task process: the child of submitit's local controller (whose pid is the job id)."""
    for folder in (sweep / ".submitit").glob("[0-9]*"):
        children = Path(f"/proc/{folder.name}/task/{folder.name}/children")
        if children.exists() and children.read_text().split():
            return int(children.read_text().split()[0])
    return None


@pytest.mark.slow
def test_a_preempted_job_is_requeued_and_resumes_from_its_checkpoint(
    tmp_path, repo_root, offline_env, checkpoint_step, run_records
):
    sweep = tmp_path / "sweep"
    process = subprocess.Popen(
        [
            sys.executable,
            "sweep.py",
            "hydra/launcher=submitit_local",
            f"hydra.sweep.dir={sweep}",
            "sweep_name=requeue",
            "evaluator=none",
            "trainer.enable_progress_bar=false",
            "data.max_train_samples=48",
            "objective.epochs=1",
            "objective.batch_size=2",
            "objective.grad_accum=1",
            "checkpoint_every_n_steps=2",
            "save_model=false",
            "logger=wandb",
            "seed=1",
        ],
        cwd=repo_root,
        env={**os.environ, **offline_env, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not any((checkpoint_step(p) or 0) >= SIGNAL_AFTER_STEP for p in sweep.glob("0_*/checkpoints/last.ckpt")):
            assert process.poll() is None and time.monotonic() < deadline, "no checkpoint before the job ended"
            time.sleep(0.5)
        os.kill(task_pid(sweep), signal.SIGUSR2)  # what Slurm sends signal_delay_s before preempting
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output[-3000:]
    (job,) = sweep.glob("0_*")
    log = "".join(p.read_text() for p in (sweep / ".submitit").glob("*/*_0_log.*"))  # the job's output, both runs
    assert "Caught signal SIGUSR2" in log and "this job is preempted" in log and "Requeued job" in log
    assert "Restoring states from the checkpoint" in log
    train = json.loads((job / "metrics.json").read_text())["train"]
    assert train["optimizer_steps"] == -(-train["samples"]["train"] // 2)  # the whole epoch, once
    first, resumed = run_records(job / "wandb")
    assert first["id"] == resumed["id"] == (job / "wandb_run_id.txt").read_text().strip()
    assert (resumed["group"], resumed["exit_code"]) == ("requeue", 0)
