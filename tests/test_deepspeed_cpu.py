"""DeepSpeed through the real entry point on two CPU processes (DeepSpeed's CPU accelerator over gloo): ZeRO-2
with the optimizer offloaded makes DDP's steps and exports DDP's weights."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from test_run import FAST, run

CPU_ZERO = ["trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.strategy.config.bf16.enabled=false"]


def _losses(out) -> list[float]:
    return [float(row["train/loss"]) for row in csv.DictReader((out / "metrics.csv").open()) if row["train/loss"]]


def _weights(out) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    return {name: param.detach() for name, param in model.named_parameters()}


@pytest.mark.slow
def test_zero2_with_the_optimizer_offloaded_matches_ddp_on_two_cpu_processes(tmp_path, ddp_run):
    """ZeRO-Offload: the optimizer state in host memory, stepped by DeepSpeed's CPU AdamW, makes the steps of
    DDP's run (tests/conftest.py: the same epoch in batches of 4, then evaluated; ZeRO-3 against DDP:
    tests/test_zero3_init.py)."""
    out = tmp_path / "zero2"
    offload = "+trainer.strategy.config.zero_optimization.offload_optimizer={device: cpu}"
    same = ["trainer.devices=2", "logger=csv", "objective.batch_size=4"]
    result = run(f"hydra.run.dir={out}", *FAST, *same, "trainer=deepspeed_zero2", *CPU_ZERO, offload)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = json.loads((ddp_run / "metrics.json").read_text())["train"]["optimizer_steps"]
    assert steps >= 2 and json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == steps
    assert_same_training(out, ddp_run)


def assert_same_training(out, plain_out) -> None:
    """The run in ``out`` logged ``plain_out``'s losses and exported its weights (to tolerance)."""
    assert _losses(out) == pytest.approx(_losses(plain_out), rel=1e-4)
    assert_same_weights(out, plain_out)


def assert_same_weights(out, plain_out) -> None:
    """The run in ``out`` exported ``plain_out``'s weights (to tolerance)."""
    plain, trained = _weights(plain_out), _weights(out)
    assert trained.keys() == plain.keys()
    for name, weight in plain.items():
        torch.testing.assert_close(trained[name], weight, rtol=1e-4, atol=1e-5, msg=name)
