"""The DPO loss types added for TRL parity, ORPO's odds-ratio term and KTO's loss against small cases computed
by hand, and ORPO's against TRL's own ``odds_ratio_loss``. TRL's own loss code checks the DPO loss types in
tests/objectives/test_losses.py (``DPOTrainer._compute_loss``, one case per type) and KTO's in test_kto.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rpbench.objectives.losses import dpo_loss, kto_kl, kto_loss, orpo_loss

torch.manual_seed(0)
N = 6
PC, PR, RC, RR = (-30 + 20 * torch.rand(N, dtype=torch.float64) for _ in range(4))


def test_dpo_loss_types_hand_computed():
    """Chosen log-ratio 1, rejected -1, beta 1: c = 1, r = -1, margin 2."""
    one, zero = torch.tensor([1.0], dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    minus = -one

    def loss(loss_type, ls=0.0):
        return dpo_loss(one, minus, zero, zero, beta=1.0, loss_type=loss_type, label_smoothing=ls)[0].item()

    sp = math.log1p(math.exp(-1))  # -logsigmoid(1)
    sm = math.log1p(math.e)  # -logsigmoid(-1)
    sig1 = 1 / (1 + math.exp(-1))
    assert loss("nca_pair") == pytest.approx(sp + 0.5 * sm + 0.5 * sp)
    assert loss("bco_pair") == pytest.approx(2 * sp)
    assert loss("sppo_hard") == pytest.approx(0.25 + 0.25)  # (1 - 0.5)^2 + (-1 + 0.5)^2
    assert loss("apo_zero") == pytest.approx(1 - sig1 + (1 - sig1))
    assert loss("apo_down") == pytest.approx(sig1 + 1 - 1 / (1 + math.exp(-2)))
    q = 1 / (1 + math.exp(-2))  # EXO with eps 0.1: KL([q, 1 - q] || [0.9, 0.1])
    assert loss("exo_pair", 0.1) == pytest.approx(q * math.log(q / 0.9) + (1 - q) * math.log((1 - q) / 0.1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss_type": "exo_pair"}, "needs label_smoothing > 0"),
        ({"loss_type": "nca_pair", "label_smoothing": 0.1}, "applies to sigmoid, robust, exo_pair only"),
    ],
)
def test_dpo_loss_types_refuse_bad_smoothing(kwargs, match):
    x = torch.zeros(1)
    with pytest.raises(ValueError, match=match):
        dpo_loss(x, x, x, x, **{"beta": 0.1, "label_smoothing": 0.0, **kwargs})


# -- ORPO ---------------------------------------------------------------------------------------------


def trl_orpo(chosen: torch.Tensor, rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """TRL's own ``ORPOTrainer.odds_ratio_loss`` (trl.experimental.orpo), on a trainer made without
    ``__init__`` that has the two attributes it reads; its losses are ``beta * log sigmoid(log odds)`` (the
    trainer subtracts their mean from the NLL), returned here as rpbench's positive per-pair term."""
    from accelerate import Accelerator
    from trl.experimental.orpo import ORPOTrainer

    trainer = ORPOTrainer.__new__(ORPOTrainer)
    trainer.beta, trainer.accelerator = beta, Accelerator(cpu=True)
    losses = trainer.odds_ratio_loss(chosen, rejected)[0]
    return -losses.double()


def test_orpo_matches_trl_on_mean_logps():
    chosen, rejected = -3 * torch.rand(N, dtype=torch.float64) - 0.01, -3 * torch.rand(N, dtype=torch.float64) - 0.01
    terms, log_odds = orpo_loss(chosen, rejected, beta=0.1)
    assert torch.allclose(terms, trl_orpo(chosen, rejected, 0.1), rtol=1e-5)  # TRL computes in float32
    assert terms.requires_grad is False and log_odds.shape == (N,)


def test_orpo_hand_computed_and_stable_near_zero():
    # p_chosen 1/2 (odds 1), p_rejected 1/4 (odds 1/3): log odds ratio log 3; term -beta * log(3/4)
    terms, log_odds = orpo_loss(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]), beta=0.2)
    assert log_odds.item() == pytest.approx(math.log(3))
    assert terms.item() == pytest.approx(0.2 * math.log(4 / 3), rel=1e-6)
    tiny = torch.tensor([-1e-9], dtype=torch.float64)  # p almost 1: log(1 - p) = log(1e-9), no -inf
    assert torch.isfinite(orpo_loss(tiny, torch.tensor([-2.0], dtype=torch.float64), beta=0.1)[0]).all()


# -- KTO ----------------------------------------------------------------------------------------------


def trl_kto(policy, ref, policy_kl, ref_kl, label, beta, desirable_weight, undesirable_weight):
    """TRL's KTOTrainer loss: the KL estimate from the mismatched pairs, then the chosen losses followed by
    the rejected ones, each weighted."""
    kl = (policy_kl - ref_kl).mean().detach().clamp(min=0)
    chosen = [i for i in range(len(label)) if label[i]]
    rejected = [i for i in range(len(label)) if not label[i]]
    chosen_logratios = policy[chosen] - ref[chosen]
    rejected_logratios = policy[rejected] - ref[rejected]
    chosen_losses = 1 - F.sigmoid(beta * (chosen_logratios - kl))
    rejected_losses = 1 - F.sigmoid(beta * (kl - rejected_logratios))
    return torch.cat((desirable_weight * chosen_losses, undesirable_weight * rejected_losses)), chosen, rejected


@pytest.mark.parametrize(("shift", "weights"), [(0.0, (1.0, 1.0)), (5.0, (1.0, 1.33)), (-5.0, (0.7, 1.0))])
def test_kto_matches_trl_formula(shift, weights):
    policy, ref = -20 + 10 * torch.rand(N, dtype=torch.float64), -20 + 10 * torch.rand(N, dtype=torch.float64)
    policy_kl, ref_kl = policy.roll(1) + shift, ref.roll(1)  # mismatched pairs: (x_i, y_{i-1})
    label = [True, False, True, True, False, False]
    desirable = torch.tensor(label)
    kl = kto_kl(policy_kl, ref_kl)
    losses, rewards = kto_loss(
        policy, ref, desirable, kl, beta=0.1, desirable_weight=weights[0], undesirable_weight=weights[1]
    )
    expected, chosen, rejected = trl_kto(policy, ref, policy_kl, ref_kl, label, 0.1, *weights)
    assert torch.allclose(torch.cat((losses[chosen], losses[rejected])), expected, rtol=1e-12)
    assert losses.mean().item() == pytest.approx(expected.mean().item())
    assert torch.allclose(rewards, 0.1 * (policy - ref))


def test_kto_hand_computed():
    """Log-ratios 2 (desirable) and 1 (undesirable); mismatched log-ratios 0.5 and 1.5: KL 1; beta 1."""
    policy, ref = torch.tensor([2.0, 1.0]), torch.zeros(2)
    kl = kto_kl(torch.tensor([0.5, 1.5]), torch.zeros(2))
    assert kl.item() == pytest.approx(1.0)
    losses, _ = kto_loss(
        policy, ref, torch.tensor([True, False]), kl, beta=1.0, desirable_weight=1.0, undesirable_weight=1.33
    )
    assert losses.tolist() == pytest.approx([1 - 1 / (1 + math.exp(-1)), 1.33 * 0.5])
    negative = kto_kl(torch.tensor([-3.0]), torch.zeros(1))  # a negative estimate counts as 0
    clamped, _ = kto_loss(
        policy, ref, torch.tensor([True, True]), negative, beta=1.0, desirable_weight=1.0, undesirable_weight=1.0
    )
    assert clamped[0].item() == pytest.approx(1 - 1 / (1 + math.exp(-2)))
