"""DeepSpeed ZeRO-2 (with the optimizer offloaded) and ZeRO-3 through the real entry point on two CPU
processes (DeepSpeed's CPU accelerator over gloo): the same losses and weights as plain DDP, an export that
reloads, evaluation in step."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from test_run import FAST, SHORT_TRAINING, SMALL_EVAL, run

CPU_ZERO = ["trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.strategy.config.bf16.enabled=false"]
TWO_STEPS = ["trainer.devices=2", "logger=csv", "trainer.max_steps=2", "objective.batch_size=4"]


def _losses(out) -> list[float]:
    return [float(row["train/loss"]) for row in csv.DictReader((out / "metrics.csv").open()) if row["train/loss"]]


def _weights(out) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    return {name: param.detach() for name, param in model.named_parameters()}


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    result = run(f"hydra.run.dir={out}", *FAST, *TWO_STEPS, "trainer.strategy=ddp")
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_matches_ddp_on_two_cpu_processes(tmp_path, ddp_run, stage):
    out = tmp_path / f"zero{stage}"
    evaluation = SMALL_EVAL if stage == 3 else ["evaluator=none"]  # ZeRO-3: evaluated from the gathered export
    zero = [f"trainer=deepspeed_zero{stage}", *CPU_ZERO]
    if stage == 2:  # ZeRO-Offload: the optimizer state in host memory, stepped by DeepSpeed's CPU AdamW
        zero.append("+trainer.strategy.config.zero_optimization.offload_optimizer={device: cpu}")
    result = run(f"hydra.run.dir={out}", *SHORT_TRAINING, *TWO_STEPS, *zero, *evaluation)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == 2
    assert _losses(out) == pytest.approx(_losses(ddp_run), rel=1e-4)
    plain, zero = _weights(ddp_run), _weights(out)
    assert zero.keys() == plain.keys()
    for name, weight in plain.items():
        torch.testing.assert_close(zero[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    if stage == 3:
        ids = [json.loads(line)["id"] for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert len(ids) == len(set(ids)) == 8
