"""A policy loaded with from_pretrained is in eval mode; training must still run it in train mode (dropout on)."""

from __future__ import annotations

import pytest
import torch

from rpbench.data.records import SFTExample, Turn
from rpbench.models import load
from rpbench.training import train
from rpbench.validate import validate

EXAMPLES = [
    SFTExample(f"ex{i}", (Turn("user", q), Turn("assistant", a)))
    for i, (q, a) in enumerate([("Who are you?", "Sherlock Holmes."), ("Where?", "221B Baker Street.")])
]


@pytest.mark.slow
def test_an_eval_mode_policy_with_dropout_trains_in_train_mode(compose, tmp_path):
    cfg = compose(
        "+model.tiny.attention_dropout=0.1",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "objective.epochs=1",
        "objective.batch_size=1",
        "objective.grad_accum=1",
        "save_model=false",
    )
    model, tokenizer = load(validate(cfg).model)
    assert model.config.attention_dropout == 0.1
    model.eval()  # as from_pretrained leaves it
    modes = []  # (gradients on, the model's mode, its attention's mode) at each forward of the first layer
    attention = next(m for n, m in model.named_modules() if n.endswith("self_attn"))
    attention.register_forward_pre_hook(
        lambda module, args: modes.append((torch.is_grad_enabled(), model.training, module.training))
    )

    train(validate(cfg).training, model, tokenizer, EXAMPLES, EXAMPLES, tmp_path, logger=None)

    training_forwards = [m for m in modes if m[0]]
    held_out_forwards = [m for m in modes if not m[0]]
    assert len(training_forwards) == len(EXAMPLES)  # one epoch, one sample per step
    assert all(model_mode and attention_mode for _, model_mode, attention_mode in training_forwards), modes
    assert held_out_forwards and not any(m[1] or m[2] for m in held_out_forwards), modes
