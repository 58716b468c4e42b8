"""SimPO: its loss against hand-computed values and TRL's CPOTrainer (loss_type="simpo") on the same inputs,
and a training step on the bundled pairs through the composed config."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rpbench.data.chat import ChatRenderer
from rpbench.models import load
from rpbench.models.forward import model_inputs
from rpbench.objectives.simpo import SimPOModule, SimPOSettings, simpo_loss
from rpbench.training import train
from rpbench.validate import validate


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


def test_simpo_loss_hand_computed():
    # beta 2, gamma 1, per-token means: chosen -1.0, rejected -2.0 -> 2 * (-1 - -2) - 1 = 1;
    # chosen -0.5, rejected -0.25 -> 2 * -0.25 - 1 = -1.5
    chosen, rejected = torch.tensor([-1.0, -0.5]), torch.tensor([-2.0, -0.25])
    losses, chosen_rewards, rejected_rewards = simpo_loss(chosen, rejected, beta=2.0, gamma=1.0, label_smoothing=0.0)
    assert losses.tolist() == pytest.approx([-log_sigmoid(1.0), -log_sigmoid(-1.5)])
    assert (chosen_rewards.tolist(), rejected_rewards.tolist()) == ([-2.0, -1.0], [-4.0, -0.5])
    smoothed, _, _ = simpo_loss(chosen, rejected, beta=2.0, gamma=1.0, label_smoothing=0.1)
    assert smoothed[0].item() == pytest.approx(-0.9 * log_sigmoid(1.0) - 0.1 * log_sigmoid(-1.0))


def trl_cpo(beta: float, simpo_gamma: float, label_smoothing: float):
    """TRL's own CPOTrainer.cpo_loss and get_batch_logps, on an object with the attributes they read."""
    from trl.experimental.cpo import CPOTrainer

    trainer = SimpleNamespace(
        loss_type="simpo",
        beta=beta,
        simpo_gamma=simpo_gamma,
        label_smoothing=label_smoothing,
        alpha=0.0,  # TRL's AlphaPO reward shape off: SimPO's log-prob rewards
        accelerator=SimpleNamespace(device=torch.device("cpu")),
    )
    return CPOTrainer, trainer


@pytest.mark.parametrize(("beta", "ratio", "smoothing"), [(2.0, 0.5, 0.0), (2.5, 0.3, 0.0), (0.5, 0.0, 0.2)])
def test_simpo_loss_equals_trls_on_the_same_inputs(beta, ratio, smoothing):
    cpo, trainer = trl_cpo(beta, ratio * beta, smoothing)
    g = torch.Generator().manual_seed(0)
    chosen, rejected = -3 * torch.rand(6, generator=g), -3 * torch.rand(6, generator=g)
    expected = cpo.cpo_loss(trainer, chosen, rejected)
    got = simpo_loss(chosen, rejected, beta=beta, gamma=ratio * beta, label_smoothing=smoothing)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_a_simpo_step_is_trls_loss_with_its_nll_term(tiny_model, objective_config, sample_pairs):
    """One pair (TRL's NLL is a token mean over the batch's chosen tokens, rpbench's a mean over pairs of
    per-pair means: the same for one pair): TRL's length-normalised log-probs, loss and cpo_alpha term from
    the model's full logits against the module's chunked training step."""
    model, tokenizer = load(tiny_model())
    settings = objective_config("simpo", cpo_alpha=0.7, label_smoothing=0.1)
    module = SimPOModule(model.eval(), tokenizer, settings)
    samples, _ = SimPOModule.render(sample_pairs[:1], ChatRenderer(tokenizer, "<|im_end|>", 512))
    batch = SimPOModule.collate(samples, tokenizer.pad_token_id)
    batch["loss_scale"] = torch.tensor(1.0)
    cpo, trainer = trl_cpo(settings.beta, settings.gamma_beta_ratio * settings.beta, 0.1)
    with torch.no_grad():
        logits = model(**model_inputs(batch, "sdpa")).logits
        means = cpo.get_batch_logps(logits, batch["labels"], average_log_prob=True)
        losses, _, _ = cpo.cpo_loss(trainer, means[:1], means[1:])
        nll = torch.nn.functional.cross_entropy(logits[0, :-1], batch["labels"][0, 1:])  # TRL's, on the chosen row
        got = module.training_step(batch, 0)
    assert got.item() == pytest.approx((losses.mean() + 0.7 * nll).item(), rel=1e-5)


def test_invalid_settings_are_named(objective_settings):
    with pytest.raises(ValueError, match=r"objective.cpo_alpha=-1.0: expected a number >= 0"):
        SimPOSettings.parse(objective_settings("simpo", cpo_alpha=-1.0), "objective")
    with pytest.raises(ValueError, match=r"objective.label_smoothing must lie in \[0, 0.5\), got 0.5"):
        SimPOSettings.parse(objective_settings("simpo", label_smoothing=0.5), "objective")


def test_simpo_trains_from_the_composed_config_without_a_reference(compose, tmp_path, sample_pairs):
    cfg = compose(
        "objective=simpo",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "save_model=false",
        "trainer.max_steps=1",
        "objective.batch_size=4",
        "objective.grad_accum=1",
        "objective.lr=1e-3",
        "objective.warmup_ratio=0",
    )
    assert (cfg.objective.beta, cfg.objective.gamma_beta_ratio, cfg.objective.cpo_alpha) == (2.0, 0.5, 0.0)
    model, tokenizer = load(validate(cfg).model)
    report = train(
        validate(cfg).training, model, tokenizer, sample_pairs[:4], sample_pairs[:4], tmp_path / "run", logger=None
    )
    assert report["optimizer_steps"] == 1
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert after["loss"] < before["loss"] and after["reward_margin"] > before["reward_margin"]
    assert not (tmp_path / "run" / "reference_logps.json").exists()  # reference-free
