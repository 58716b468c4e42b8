"""A loss that becomes NaN stops the run with one clear line and leaves the last checkpoint as it was."""

from __future__ import annotations

import re

import pytest
import torch

from conftest import run_script


@pytest.mark.slow
def test_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    # lr 1e30: the first steps blow the weights up, a later loss is NaN; a checkpoint after every step.
    result = run_script(
        "run.py",
        f"hydra.run.dir={tmp_path}",
        "evaluator=none",
        "trainer.enable_progress_bar=false",
        "data.max_train_samples=24",
        "objective.batch_size=2",
        "objective.grad_accum=1",
        "objective.lr=1e30",
        "checkpoint_every_n_steps=1",
        OMP_NUM_THREADS="1",
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    found = re.search(
        r"the loss is (nan|inf|-inf) at optimizer step (\d+).*checkpoints/last.ckpt \(step (\d+)\)", errors[0]
    )
    assert found, errors[0]
    failed_at, kept_step = int(found.group(2)), int(found.group(3))
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == kept_step == failed_at  # written after the last finite step, not after
    assert not (tmp_path / "metrics.json").exists()
    assert (tmp_path / "error.txt").read_text().startswith("NonFiniteLossError: training stopped")
    assert str(tmp_path) not in errors[0]  # no machine paths in the message
