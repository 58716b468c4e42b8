"""GRPO under DeepSpeed ZeRO-3 on two CPU processes (gloo), through `python run.py`: the rollouts run on the
model gathered once per generation batch (nothing stays gathered between them: persistence threshold 0), the
KL reference is built partitioned from the policy's config, and the run's rollouts (rewards), KL, losses and
exported weights are DDP's."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

GRPO = [
    "objective=grpo",
    "trainer.devices=2",
    "trainer.enable_progress_bar=false",
    "logger=csv",
    "evaluator=none",
    "data.max_train_samples=8",
    "data.val_fraction=0",
    "objective.batch_size=2",
    "objective.num_generations=2",
    "objective.max_completion_length=6",
    "objective.log_every_n_steps=1",
    "objective.lr=1e-3",
    "objective.clip_grad_norm=null",  # DeepSpeed clips itself: off in both
    "objective.beta=0.1",
    "trainer.max_steps=2",
]
ZERO3 = [
    "trainer=deepspeed_zero3",
    "trainer.accelerator=cpu",
    "trainer.precision=32-true",
    "trainer.strategy.config.bf16.enabled=false",
    "trainer.strategy.config.zero_optimization.stage3_param_persistence_threshold=0",
]


COMPARED = ["train/loss", "train/kl", "train/reward", "train/advantages/abs_mean", "train/completion_length/mean"]


def _step_metrics(out) -> list[list[float]]:
    rows = csv.DictReader((out / "metrics.csv").open())
    return [[float(row[key]) for key in COMPARED] for row in rows if row["train/loss"]]


def _weights(out) -> dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in AutoModelForCausalLM.from_pretrained(out / "model").named_parameters()}


@pytest.mark.slow
def test_grpo_under_zero3_gathers_for_rollouts_and_matches_ddp(tmp_path, run_script):
    runs = {}
    for name, strategy in (("ddp", ["trainer.strategy=ddp"]), ("zero3", ZERO3)):
        out = tmp_path / name
        result = run_script("run.py", f"hydra.run.dir={out}", *GRPO, *strategy)
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == 2
        runs[name] = out
    plain, zero = _step_metrics(runs["ddp"]), _step_metrics(runs["zero3"])
    assert len(plain) == 2 and plain[1][1] > 0  # the second step's policy has left the reference
    for step_zero, step_plain in zip(zero, plain, strict=True):
        assert step_zero == pytest.approx(step_plain, rel=1e-4, abs=1e-9)
    plain, zero = _weights(runs["ddp"]), _weights(runs["zero3"])
    assert zero.keys() == plain.keys()
    for name, weight in plain.items():
        torch.testing.assert_close(zero[name], weight, rtol=1e-4, atol=1e-5, msg=name)
