"""The DPO loss types added for TRL parity, ORPO's odds-ratio term and KTO's loss: each against TRL's formula
written out here as the peer (TRL's DPOTrainer / ORPOTrainer / KTOTrainer loss code, transcribed) on the same
random inputs, and against small cases computed by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rpbench.objectives.losses import dpo_loss, kto_kl, kto_loss, orpo_loss

torch.manual_seed(0)
N = 6
PC, PR, RC, RR = (-30 + 20 * torch.rand(N, dtype=torch.float64) for _ in range(4))


def trl_dpo(loss_type: str, beta: float, ls: float) -> torch.Tensor:
    """TRL's per-pair DPO losses (DPOTrainer, reverse KL) for the loss types rpbench added."""
    chosen_logratios, rejected_logratios = PC - RC, PR - RR
    logits = chosen_logratios - rejected_logratios
    if loss_type == "exo_pair":
        return (beta * logits).sigmoid() * (F.logsigmoid(beta * logits) - math.log(1 - ls)) + (
            -beta * logits
        ).sigmoid() * (F.logsigmoid(-beta * logits) - math.log(ls))
    if loss_type == "nca_pair":
        c, r = beta * chosen_logratios, beta * rejected_logratios
        return -F.logsigmoid(c) - 0.5 * F.logsigmoid(-c) - 0.5 * F.logsigmoid(-r)
    if loss_type == "bco_pair":
        return -F.logsigmoid(beta * chosen_logratios) - F.logsigmoid(-beta * rejected_logratios)
    if loss_type == "sppo_hard":
        return (chosen_logratios - 0.5 / beta) ** 2 + (rejected_logratios + 0.5 / beta) ** 2
    if loss_type == "apo_zero":
        return 1 - F.sigmoid(beta * chosen_logratios) + F.sigmoid(beta * rejected_logratios)
    assert loss_type == "apo_down"
    return F.sigmoid(beta * chosen_logratios) + 1 - F.sigmoid(beta * (chosen_logratios - rejected_logratios))


@pytest.mark.parametrize(
    ("loss_type", "beta", "ls"),
    [
        ("exo_pair", 0.1, 1e-3),
        ("exo_pair", 0.5, 0.2),
        ("nca_pair", 0.1, 0.0),
        ("bco_pair", 0.2, 0.0),
        ("sppo_hard", 0.1, 0.0),
        ("apo_zero", 0.1, 0.0),
        ("apo_down", 0.3, 0.0),
    ],
)
def test_dpo_loss_types_match_trl_formulas(loss_type, beta, ls):
    losses, chosen, rejected = dpo_loss(PC, PR, RC, RR, beta=beta, loss_type=loss_type, label_smoothing=ls)
    assert torch.allclose(losses, trl_dpo(loss_type, beta, ls), rtol=1e-12, atol=1e-12)
    assert torch.allclose(chosen, beta * (PC - RC)) and torch.allclose(rejected, beta * (PR - RR))


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
    """TRL's ORPOTrainer.odds_ratio_loss (losses = beta * log sigmoid(log odds); the trainer subtracts their
    mean from the NLL), as a positive per-pair term."""
    log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen)) - torch.log1p(-torch.exp(rejected)))
    return -(beta * torch.log(F.sigmoid(log_odds)))


def test_orpo_matches_trl_formula_on_mean_logps():
    chosen, rejected = -3 * torch.rand(N, dtype=torch.float64) - 0.01, -3 * torch.rand(N, dtype=torch.float64) - 0.01
    terms, log_odds = orpo_loss(chosen, rejected, beta=0.1)
    assert torch.allclose(terms, trl_orpo(chosen, rejected, 0.1), rtol=1e-10)
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
