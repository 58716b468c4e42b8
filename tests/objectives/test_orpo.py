"""ORPO: the training step against a full-logits computation and TRL's odds-ratio formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rpbench.data.chat import ChatRenderer
from rpbench.models import load
from rpbench.objectives.orpo import ORPOModule


def test_training_step_is_chosen_nll_plus_the_odds_ratio_term(
    tiny_model, objective_config, sample_pairs, naive_sequence_logps
):
    model, tokenizer = load(tiny_model("llama"))
    module = ORPOModule(model, tokenizer, objective_config("orpo", beta=0.5, pair_layout="padded"))
    module.on_models_built()
    samples, _ = ORPOModule.render(sample_pairs[:3], ChatRenderer(tokenizer, "<|eot_id|>", 512))
    batch = ORPOModule.collate(samples, tokenizer.pad_token_id)
    batch["loss_scale"] = torch.tensor(1.0)
    with torch.no_grad():
        logps, counts = naive_sequence_logps(model, batch)
        means = (logps / counts).double()
        chosen, rejected = means[:3], means[3:]
        # TRL's ORPOTrainer.odds_ratio_loss, written out
        log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen)) - torch.log1p(-torch.exp(rejected)))
        expected = -chosen - 0.5 * torch.log(F.sigmoid(log_odds))
        got = module.training_step(batch, 0)
    assert not hasattr(module, "reference")  # reference-free: none is built
    assert got.item() == pytest.approx(expected.sum().item(), rel=5e-5)
