"""ZeRO-3 builds the trained models inside the engine's init context (two CPU processes, DeepSpeed's CPU
accelerator over gloo): no rank holds a whole parameter once they are built; DPO with a precomputed
reference (the default), killed after a step and resumed, makes DDP's steps, exports DDP's weights and
shares its reference cache, and the export is evaluated; LoRA adapters built partitioned start at zero
(GRPO's partitioned reference: tests/objectives/test_grpo_zero3.py)."""

from __future__ import annotations

import json
import math
import signal

import pytest

from rpbench.models import DeferredModel
from rpbench.pipeline import build_models
from rpbench.validate import validate

TWO_STEPS = ["trainer.devices=2", "logger=csv", "trainer.max_steps=2", "objective.batch_size=4"]


@pytest.fixture(scope="module")
def run_dpo(run, fast):
    """run_dpo(out, *overrides) -> out: `python run.py` of two DPO steps in ``out``, which must succeed."""

    def run_dpo(out, *overrides):
        result = run(f"hydra.run.dir={out}", "objective=dpo", *fast, *TWO_STEPS, *overrides)
        assert result.returncode == 0, result.stderr[-3000:]
        return out

    return run_dpo


def _signature(out) -> str:
    return json.loads((out / "reference_logps.json").read_text())["signature"]


def test_under_zero3_the_pipeline_loads_tokenizers_and_defers_the_trained_models(compose):
    zero3 = compose("objective=dpo", "trainer=deepspeed_zero3", "trainer.accelerator=cpu")  # no CUDA here
    run = validate(zero3)
    model, tokenizer = build_models(run.training, run.model)["policy"]
    assert isinstance(model, DeferredModel) and model.tokenizer is tokenizer
    dpo = compose("objective=dpo")
    run = validate(dpo)
    assert not isinstance(build_models(run.training, run.model)["policy"][0], DeferredModel)


@pytest.mark.slow
def test_lora_adapters_built_partitioned_start_at_zero(tmp_path, cpu_zero, logged_losses, run_dpo):
    """peft's initialisation, lost on partitioned layers, is redone: lora_B is zero, so the policy starts as
    its LoRA-disabled reference and DPO's first loss is ln 2; the run trains and exports the merged model."""
    lora = [
        "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: null}",
        "objective.precompute_ref=false",
        "objective.lr=1e-2",
    ]
    out = run_dpo(tmp_path / "zero3_lora", "trainer=deepspeed_zero3", *cpu_zero, *lora)
    first, second = logged_losses(out)
    assert first == pytest.approx(math.log(2), abs=1e-6)
    assert abs(second - math.log(2)) > 1e-4  # the adapters trained
    assert json.loads((out / "metrics.json").read_text())["train"]["zero3_init"]["partitioned"]
    assert (out / "model" / "config.json").exists() and not (out / "model" / "adapter_config.json").exists()


@pytest.fixture(scope="module")
def ddp_dpo(tmp_path_factory, run_dpo):
    return run_dpo(tmp_path_factory.mktemp("ddp_dpo"), "trainer.strategy=ddp")


@pytest.mark.slow
def test_zero3_dpo_is_built_partitioned_and_killed_after_a_step_resumes_to_ddps_steps_weights_and_cache(
    tmp_path, ddp_dpo, short_training, small_eval, cpu_zero, run_script, repo_root, logged_losses, assert_same_weights
):
    """The models are built partitioned and the reference log-probs precomputed at fit start; the run killed after
    its first step made DDP's; resumed, it continues its epoch where the checkpoint left it, makes the
    uninterrupted run's second step, and evaluates the gathered export on both ranks."""
    out = tmp_path / "zero3"
    evaluated = ["objective=dpo", *short_training, *small_eval, *TWO_STEPS]
    zero3 = [f"hydra.run.dir={out}", *evaluated, "trainer=deepspeed_zero3", *cpu_zero, "checkpoint_every_n_steps=1"]
    kill = "+trainer.callbacks=[{_target_: conftest.KillAfterStep, step: 1, hard: true}]"
    killed = run_script("run.py", *zero3, kill, PYTHONPATH=str(repo_root / "tests"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    first_step = logged_losses(out)  # the killed run's curve, written as it went
    resumed = run_script("run.py", *zero3, "resume=force")  # force: the kill callback is gone
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train"]["optimizer_steps"] == 2 and "resume=force" in metrics["warnings"][0]
    built = metrics["train"]["zero3_init"]
    assert built["partitioned"]
    assert len(built["largest_held_per_rank"]) == 2
    half = -(-built["largest_parameter"] // 2)  # each rank holds its half (rounded up) of the largest parameter
    assert all(0 < held <= half for held in built["largest_held_per_rank"])
    assert first_step == pytest.approx(logged_losses(ddp_dpo)[:1], rel=1e-4)
    assert logged_losses(out) == pytest.approx(
        logged_losses(ddp_dpo)[1:], rel=1e-4
    )  # the resumed run logged step 2 alone
    assert_same_weights(out, ddp_dpo)
    assert _signature(out) == _signature(ddp_dpo)  # the same weights sign the same: strategies share a cache
    ids = [json.loads(line)["id"] for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 8  # both ranks generated their share of the test records
