"""DeepSpeed through the real entry point on two CPU processes (DeepSpeed's CPU accelerator over gloo): ZeRO-2
with the optimizer offloaded makes DDP's steps and exports DDP's weights."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_zero2_with_the_optimizer_offloaded_matches_ddp_on_two_cpu_processes(
    tmp_path, ddp_run, run, fast, assert_same_training, cpu_zero
):
    """ZeRO-Offload: the optimizer state in host memory, stepped by DeepSpeed's CPU AdamW, makes the steps of
    DDP's run (tests/conftest.py: the same epoch in batches of 4, then evaluated; ZeRO-3 against DDP:
    tests/test_zero3_init.py)."""
    out = tmp_path / "zero2"
    offload = "+trainer.strategy.config.zero_optimization.offload_optimizer={device: cpu}"
    same = ["trainer.devices=2", "logger=csv", "objective.batch_size=4"]
    result = run(f"hydra.run.dir={out}", *fast, *same, "trainer=deepspeed_zero2", *cpu_zero, offload)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = json.loads((ddp_run / "metrics.json").read_text())["train"]["optimizer_steps"]
    assert steps >= 2 and json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == steps
    assert_same_training(out, ddp_run)


@pytest.fixture(scope="module")
def assert_same_training(logged_losses, assert_same_weights):
    """The run in ``out`` logged ``plain_out``'s losses and exported its weights (to tolerance)."""

    def assert_same_training(out, plain_out) -> None:
        assert logged_losses(out) == pytest.approx(logged_losses(plain_out), rel=1e-4)
        assert_same_weights(out, plain_out)

    return assert_same_training
