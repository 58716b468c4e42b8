"""GRPO under DDP: two gloo ranks on CPU, through `python run.py` as a user runs it."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_ranks_make_the_same_backward_calls_when_the_last_batch_is_smaller(tmp_path, run_script):
    """5 prompts, 2 per batch: batches of 2, 2, 1. The second step pairs the 1-prompt batch (rank 0: 2
    completions, 2 chunks) with a repeat of a 2-prompt batch (rank 1: 4 chunks); unequal backward calls
    (each an all-reduce) would hang or fail the run."""
    out = tmp_path / "run"
    result = run_script(
        "run.py",
        f"hydra.run.dir={out}",
        "objective=grpo",
        "trainer.devices=2",
        "trainer.strategy=ddp",
        "trainer.enable_progress_bar=false",
        "logger=none",
        "evaluator=none",
        "save_model=false",
        "data.max_train_samples=5",
        "data.val_fraction=0",
        "objective.batch_size=2",
        "objective.num_generations=2",
        "objective.max_completion_length=4",
        "objective.backward_chunk_size=1",
        "objective.mu=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    train = json.loads((out / "metrics.json").read_text())["train"]
    assert train["samples"]["train"] == 5
    assert train["optimizer_steps"] == 2 * 2  # 2 steps of 2 batches on 2 ranks, mu 2 each
