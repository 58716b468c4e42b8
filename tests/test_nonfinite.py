"""A loss that becomes NaN stops the run with one clear line and leaves the last checkpoint as it was.

What run.py runs, in-process: the error is a user error (RpbenchError), which run.py prints as one
`error:` line and records in error.txt (that handling: tests/test_validate.py, tests/test_sweep.py)."""

from __future__ import annotations

import re

import pytest
import torch

from rpbench.core.errors import RpbenchError


def test_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path, run_in_process):
    # lr 1e30: the first steps blow the weights up, a later loss is NaN; a checkpoint after every step.
    with pytest.raises(RpbenchError) as error:
        run_in_process(
            tmp_path,
            "evaluator=none",
            "trainer.enable_progress_bar=false",
            "data.max_train_samples=24",
            "objective.batch_size=2",
            "objective.grad_accum=1",
            "objective.lr=1e30",
            "checkpoint_every_n_steps=1",
        )
    message = str(error.value)
    assert type(error.value).__name__ == "NonFiniteLossError" and message.startswith("training stopped")
    found = re.search(
        r"the loss is (nan|inf|-inf) at optimizer step (\d+).*checkpoints/last.ckpt \(step (\d+)\)", message
    )
    assert found, message
    failed_at, kept_step = int(found.group(2)), int(found.group(3))
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == kept_step == failed_at  # written after the last finite step, not after
    assert not (tmp_path / "metrics.json").exists()
    assert str(tmp_path) not in message  # no machine paths in the message
