"""ZeRO-3 builds the trained models inside the engine's init context (two CPU processes, DeepSpeed's CPU
accelerator over gloo): no rank holds a whole parameter once they are built; DPO with a precomputed
(default) or live reference makes the same steps as DDP, sharing the reference cache; GRPO's reference,
built from the policy's config, gives DDP's KL."""

from __future__ import annotations

import csv
import json

import pytest
from test_deepspeed_cpu import CPU_ZERO, TWO_STEPS, _losses, _weights

from rpbench.models import DeferredModel, load_model, load_tokenizer
from rpbench.models.zero3 import transformers_see_zero3
from rpbench.pipeline import build_models, model_config
from test_run import FAST, run

DPO = ["objective=dpo", *FAST, *TWO_STEPS]


def _run(out, *overrides):
    result = run(f"hydra.run.dir={out}", *DPO, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _signature(out) -> str:
    return json.loads((out / "reference_logps.json").read_text())["signature"]


def test_under_zero3_the_pipeline_loads_tokenizers_and_defers_the_trained_models(compose):
    model, tokenizer = build_models(compose("objective=dpo", "trainer=deepspeed_zero3"))["policy"]
    assert isinstance(model, DeferredModel) and model.tokenizer is tokenizer
    assert not isinstance(build_models(compose("objective=dpo"))["policy"][0], DeferredModel)


def test_lora_under_zero3_is_refused_with_the_alternatives(compose):
    cfg = model_config(compose("model.lora={r:4}"))
    with transformers_see_zero3({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}):
        with pytest.raises(ValueError, match="model.lora cannot be combined with trainer=deepspeed_zero3"):
            load_model(cfg, load_tokenizer(cfg))


@pytest.fixture(scope="module")
def ddp_dpo(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("ddp_dpo"), "trainer.strategy=ddp")


@pytest.mark.slow
def test_zero3_dpo_is_built_partitioned_and_matches_ddp_with_a_precomputed_reference(tmp_path, ddp_dpo):
    out = _run(tmp_path / "zero3", "trainer=deepspeed_zero3", *CPU_ZERO)
    built = json.loads((out / "metrics.json").read_text())["train"]["zero3_init"]
    assert built["partitioned"]
    assert len(built["largest_held_per_rank"]) == 2
    half = -(-built["largest_parameter"] // 2)  # each rank holds its half (rounded up) of the largest parameter
    assert all(0 < held <= half for held in built["largest_held_per_rank"])
    assert _losses(out) == pytest.approx(_losses(ddp_dpo), rel=1e-4)
    assert _signature(out) == _signature(ddp_dpo)  # the same weights sign the same: strategies share a cache


@pytest.mark.slow
def test_zero3_dpo_live_reference_is_built_from_the_policy_config_and_matches_ddp(tmp_path, ddp_dpo):
    out = _run(tmp_path / "zero3_live", "trainer=deepspeed_zero3", *CPU_ZERO, "objective.precompute_ref=false")
    built = json.loads((out / "metrics.json").read_text())["train"]["zero3_init"]
    assert built["partitioned"]
    # the reference (the policy built again, frozen) is partitioned with it: twice the policy's parameters
    assert built["parameters"] == 2 * sum(weight.numel() for weight in _weights(out).values())
    assert not (out / "reference_logps.json").exists()
    assert _losses(out) == pytest.approx(_losses(ddp_dpo), rel=1e-4)  # the live reference gives the cached values


GRPO = [
    "objective=grpo",
    "trainer.devices=2",
    "trainer.enable_progress_bar=false",
    "logger=csv",
    "evaluator=none",
    "save_model=false",
    "data.max_train_samples=8",
    "data.val_fraction=0",
    "objective.batch_size=2",
    "objective.num_generations=2",
    "objective.max_completion_length=4",
    "objective.clip_grad_norm=null",  # DeepSpeed clips itself
    "objective.beta=0.1",
    "objective.lr=0.01",
    "objective.log_every_n_steps=1",
]


def _kl_and_loss(out) -> list[tuple[float, float]]:
    rows = csv.DictReader((out / "metrics.csv").open())
    return [(float(row["train/kl"]), float(row["train/loss"])) for row in rows if row["train/loss"]]


@pytest.mark.slow
def test_zero3_grpo_reference_built_from_the_policy_config_gives_ddp_kl(tmp_path):
    curves = {}
    for name, strategy in {"ddp": ["trainer.strategy=ddp"], "zero3": ["trainer=deepspeed_zero3", *CPU_ZERO]}.items():
        result = run(f"hydra.run.dir={tmp_path / name}", *GRPO, *strategy)
        assert result.returncode == 0, result.stderr[-3000:]
        curves[name] = _kl_and_loss(tmp_path / name)
    assert len(curves["ddp"]) == 2 and curves["ddp"][1][0] > 0  # the second step's policy has left the reference
    for zero, plain in zip(curves["zero3"], curves["ddp"], strict=True):
        assert zero == pytest.approx(plain, rel=1e-4, abs=1e-7)
