"""SFT through a real Lightning Trainer on the tiny models."""

from __future__ import annotations

import pytest

from rpbench.data.records import SFTExample, Turn
from rpbench.models import load
from rpbench.training import train
from rpbench.validate import validate

EXAMPLES = [
    SFTExample(
        f"ex{i}", (Turn("system", "You are Sherlock Holmes."), Turn("user", question), Turn("assistant", answer))
    )
    for i, (question, answer) in enumerate(
        [
            ("Who are you?", "I am Sherlock Holmes, consulting detective."),
            ("Where do you live?", "At 221B Baker Street, London."),
            ("Who is your friend?", "Doctor John Watson, my loyal companion."),
            ("What is your method?", "Observation, deduction, and patience."),
        ]
    )
]


def overfit(compose, tmp_path, model_name: str, *overrides: str) -> dict:
    cfg = compose(
        f"model={model_name}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "objective.epochs=40",
        "objective.lr=1e-2",
        "objective.batch_size=2",
        "objective.grad_accum=2",
        "objective.warmup_ratio=0",
        "objective.scheduler=constant",
        "save_model=false",
        *overrides,
    )
    model, tokenizer = load(validate(cfg).model)
    return train(validate(cfg).training, model, tokenizer, EXAMPLES, EXAMPLES, tmp_path / model_name, logger=None)


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["tiny-qwen2", "tiny-llama"])
def test_sft_overfits_a_handful_of_samples(compose, tmp_path, model_name):
    report = overfit(compose, tmp_path, model_name)
    before, after = report["held_out"]["before"]["loss"], report["held_out"]["after"]["loss"]
    assert after < 0.25 * before, (before, after)
    assert report["optimizer_steps"] == 40  # 4 samples / (2 per batch x 2 accumulated) x 40 epochs


@pytest.mark.slow
def test_sft_with_packing_overfits_too(compose, tmp_path):
    report = overfit(compose, tmp_path, "tiny-qwen2", "objective.packing=true", "objective.max_tokens_per_batch=256")
    assert report["held_out"]["after"]["loss"] < 0.25 * report["held_out"]["before"]["loss"]
