"""The DPO loss types added for TRL parity, ORPO's odds-ratio term and KTO's loss against small cases computed
by hand, and ORPO's and KTO's against TRL's own loss code (``ORPOTrainer.odds_ratio_loss``,
``KTOTrainer._compute_loss``). TRL's ``DPOTrainer._compute_loss`` checks the DPO loss types in
tests/objectives/test_losses.py (``test_dpo_loss_matches_trl``, one or more cases per type)."""

from __future__ import annotations

import math

import pytest
import torch

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
        ({"loss_type": "nca_pair", "label_smoothing": 0.1}, "applies to exo_pair, robust, sigmoid only"),
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


def test_kto_matches_trl_kto_trainer_loss(one_layer_llama):
    """TRL's own ``KTOTrainer._compute_loss`` (trainer made without ``__init__``, given the attributes it
    reads) on a tiny random Llama with TRL's fused LM head and precomputed reference log-probs, against
    ``kto_kl`` and ``kto_loss`` on the same sequences' log-probs."""
    from collections import defaultdict

    from accelerate import Accelerator
    from trl import KTOTrainer
    from trl.trainer.utils import add_fused_lm_head

    from rpbench.models.forward import sequence_logps

    model = one_layer_llama(seed=5)
    rows, seq = 4, 10
    ids, kl_ids = torch.randint(0, 64, (rows, seq)), torch.randint(0, 64, (rows, seq))
    completion = torch.zeros(rows, seq, dtype=torch.long)
    for r, (start, end) in enumerate([(3, 9), (2, 10), (4, 8), (3, 10)]):
        completion[r, start:end] = 1
    attention = torch.ones(rows, seq, dtype=torch.long)

    def logps(input_ids):
        labels = input_ids.masked_fill(completion == 0, -100)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "labels": labels,
            "position_ids": torch.arange(seq).expand(rows, seq),
        }
        with torch.no_grad():
            return sequence_logps(model, batch)[0].double()

    policy, policy_kl = logps(ids), logps(kl_ids)
    ref, ref_kl = policy - 1 + 2 * torch.rand(rows, dtype=torch.float64), policy_kl - 2 * torch.rand(rows)
    label = torch.tensor([True, False, True, False])
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    trainer = KTOTrainer.__new__(KTOTrainer)
    trainer.model, trainer.accelerator = model, Accelerator(cpu=True)
    trainer.aux_loss_enabled, trainer.precompute_ref_logps, trainer.calculate_KL = False, True, True
    trainer.loss_type, trainer.beta, trainer.desirable_weight, trainer.undesirable_weight = "kto", 0.3, 1.0, 1.33
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer._total_train_tokens, trainer._tp_size = 0, 1
    inputs = {
        "input_ids": ids,
        "attention_mask": attention,
        "completion_mask": completion,
        "KL_input_ids": kl_ids,
        "KL_attention_mask": attention,
        "KL_completion_mask": completion,
        "label": label,
        "ref_logps": ref.float(),
        "ref_KL_logps": ref_kl.float(),
    }
    with torch.no_grad():
        expected = trainer._compute_loss(model, inputs, return_outputs=False)
    losses, _ = kto_loss(
        policy, ref, label, kto_kl(policy_kl, ref_kl), beta=0.3, desirable_weight=1.0, undesirable_weight=1.33
    )
    assert losses.mean().item() == pytest.approx(expected.item(), rel=1e-4)
