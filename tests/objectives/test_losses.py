"""Loss functions against naive implementations, hand-computed values and TRL's DPO loss."""

import math
from collections import defaultdict

import pytest
import torch

from rpbench.models.forward import sequence_logps
from rpbench.objectives.losses import aggregate_loss, clipped_policy_loss, dpo_loss, group_advantages, k3_kl

# ---------------------------------------------------------------------------------------------------------
# DPO


def test_dpo_sigmoid_hand_computed():
    # d = (-1 - -2) - (-3 - -2) = 2; beta 0.5 -> -log sigmoid(1) = log(1 + e^-1)
    losses, chosen, rejected = dpo_loss(
        torch.tensor([-1.0]),
        torch.tensor([-3.0]),
        torch.tensor([-2.0]),
        torch.tensor([-2.0]),
        beta=0.5,
        loss_type="sigmoid",
        label_smoothing=0.0,
    )
    assert losses.item() == pytest.approx(math.log1p(math.exp(-1.0)))
    assert (chosen.item(), rejected.item()) == pytest.approx((0.5, -0.5))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss_type": "kto"}, "loss_type"),
        ({"beta": 0.0}, "beta"),
        ({"loss_type": "robust", "label_smoothing": 0.5}, "label_smoothing"),
        ({"loss_type": "hinge", "label_smoothing": 0.1}, "applies to"),
        ({"loss_type": "ipo", "label_smoothing": 0.1}, "applies to"),
    ],
)
def test_dpo_rejects_bad_settings(kwargs, match):
    x = torch.zeros(1)
    with pytest.raises(ValueError, match=match):
        dpo_loss(x, x, x, x, **{"beta": 0.1, "loss_type": "sigmoid", "label_smoothing": 0.0, **kwargs})


@pytest.fixture(scope="module")
def trl_setup(one_layer_llama):
    """TRL's DPOTrainer loss code on a tiny random Llama, reading precomputed reference log-probs.

    TRL >= 1.0 computes the loss inside ``DPOTrainer._compute_loss(model, inputs)``, from the per-token
    log-probs of a model patched with its fused LM head. The trainer is created without ``__init__`` and
    given exactly the attributes that method reads, so TRL's own code computes log-probs and loss.
    """
    from accelerate import Accelerator
    from trl import DPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    model = one_layer_llama(seed=3)
    n_pairs, seq = 3, 12
    input_ids = torch.randint(0, 64, (2 * n_pairs, seq))  # rows: chosen 0..2, rejected 0..2
    prompt_len = [3, 5, 4, 3, 5, 4]
    end = [9, 12, 7, 12, 8, 10]  # right padding after `end`
    completion_mask = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for row in range(2 * n_pairs):
        completion_mask[row, prompt_len[row] : end[row]] = 1
        attention_mask[row, : end[row]] = 1
    labels = input_ids.masked_fill(completion_mask == 0, -100)
    with torch.no_grad():  # our side: the production log-prob path, before TRL patches the output layer
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        }
        logps, n_tokens = sequence_logps(model, batch)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))

    trainer = DPOTrainer.__new__(DPOTrainer)
    trainer.model = model
    trainer.accelerator = Accelerator(cpu=True)
    trainer.aux_loss_enabled = False
    trainer.ld_alpha = None
    trainer.precompute_ref_logps = True
    trainer.f_divergence_type = "reverse_kl"
    trainer.use_weighting = False
    trainer._total_train_tokens = 0
    trainer._tp_size = 1
    ref_logps = -20 + 6 * torch.rand(2 * n_pairs)
    return {
        "trainer": trainer,
        "model": model,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "completion_mask": completion_mask,
        "logps": logps,
        "n_tokens": n_tokens,
        "ref_logps": ref_logps,
        "n_pairs": n_pairs,
    }


def trl_pair_loss(setup, pair, loss_type, beta, label_smoothing):
    """TRL's loss and logged rewards for one pair (TRL returns the batch mean, so pairs go one by one)."""
    trainer, n = setup["trainer"], setup["n_pairs"]
    trainer.loss_types, trainer.loss_weights = [loss_type], [1.0]
    trainer.beta, trainer.label_smoothing = beta, label_smoothing
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    rows = [pair, n + pair]
    inputs = {
        "input_ids": setup["input_ids"][rows],
        "attention_mask": setup["attention_mask"][rows],
        "completion_mask": setup["completion_mask"][rows],
        "ref_chosen_logps": setup["ref_logps"][[pair]],
        "ref_rejected_logps": setup["ref_logps"][[n + pair]],
    }
    with torch.no_grad():
        loss = trainer._compute_loss(setup["model"], inputs, return_outputs=False)
    metrics = trainer._metrics["eval"]
    return loss.item(), metrics["rewards/chosen"][0], metrics["rewards/rejected"][0]


DPO_CASES = [
    ("sigmoid", 0.1, 0.0, "sigmoid"),
    ("sigmoid", 0.5, 0.0, "sigmoid"),
    ("hinge", 0.1, 0.0, "hinge"),
    ("hinge", 2.0, 0.0, "hinge"),
    ("ipo", 0.1, 0.0, "ipo"),
    ("ipo", 0.5, 0.0, "ipo"),
    ("robust", 0.1, 0.0, "robust"),
    ("robust", 0.1, 0.1, "robust"),
    ("robust", 0.3, 0.3, "robust"),
    # TRL >= 1.0 dropped label smoothing from `sigmoid` (cDPO); its `aot` loss applies the same cDPO formula
    # to the sorted log-ratio gaps of the batch, which for a single pair is that pair's own gap.
    ("sigmoid", 0.1, 0.1, "aot"),
    ("sigmoid", 0.3, 0.25, "aot"),
    ("exo_pair", 0.1, 1e-3, "exo_pair"),
    ("exo_pair", 0.5, 0.2, "exo_pair"),
    ("nca_pair", 0.1, 0.0, "nca_pair"),
    ("bco_pair", 0.1, 0.0, "bco_pair"),
    ("sppo_hard", 0.1, 0.0, "sppo_hard"),
    ("apo_zero", 0.1, 0.0, "apo_zero"),
    ("apo_down", 0.1, 0.0, "apo_down"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("loss_type", "beta", "label_smoothing", "trl_loss_type"), DPO_CASES)
def test_dpo_loss_matches_trl(trl_setup, loss_type, beta, label_smoothing, trl_loss_type):
    setup, n = trl_setup, trl_setup["n_pairs"]
    logps, n_tokens, ref = setup["logps"], setup["n_tokens"], setup["ref_logps"]
    if loss_type == "ipo":  # the caller length-normalises policy and reference log-probs for IPO
        logps, ref = logps / n_tokens, ref / n_tokens
    losses, chosen_rewards, rejected_rewards = dpo_loss(
        logps[:n],
        logps[n:],
        ref[:n],
        ref[n:],
        beta=beta,
        loss_type=loss_type,
        label_smoothing=label_smoothing,
    )
    for pair in range(n):
        trl_loss, trl_chosen, trl_rejected = trl_pair_loss(setup, pair, trl_loss_type, beta, label_smoothing)
        assert losses[pair].item() == pytest.approx(trl_loss, rel=1e-5, abs=1e-6)
        if loss_type != "ipo":  # TRL logs unnormalised rewards even for IPO
            assert chosen_rewards[pair].item() == pytest.approx(trl_chosen, rel=1e-5, abs=1e-6)
            assert rejected_rewards[pair].item() == pytest.approx(trl_rejected, rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_trl_setup_is_sensitive_to_the_loss(trl_setup):
    """Guard against a vacuous parity test: the variants give different values on these pairs."""
    values = {t: trl_pair_loss(trl_setup, 0, t, 0.1, 0.0)[0] for t in ("sigmoid", "hinge", "ipo")}
    assert len({round(v, 4) for v in values.values()}) == 3


# ---------------------------------------------------------------------------------------------------------
# GRPO


def test_group_advantages_hand_computed():
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0], dtype=torch.float64)
    centred = [-1.5, -0.5, 0.5, 1.5, 0.0, 0.0, 0.0, 0.0]
    group_std = math.sqrt(5 / 3)  # Bessel: (2.25 + 0.25 + 0.25 + 2.25) / 3
    batch_std = math.sqrt(17.5 / 7)  # mean 3.75; squared deviations sum to 17.5
    expected = {
        "group": [c / (group_std + 1e-4) for c in centred],
        "batch": [c / (batch_std + 1e-4) for c in centred],
        "none": centred,
    }
    for scale, values in expected.items():
        got = group_advantages(rewards, group_size=4, scale=scale)
        assert got.tolist() == pytest.approx(values, rel=1e-12), scale


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_zero_variance_group_gets_exactly_zero_advantage(scale):
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7])  # 0.1 * 3 / 3 is not exactly 0.1 in floats
    got = group_advantages(rewards, group_size=3, scale=scale, eps=0.0)
    assert torch.equal(got, torch.zeros(6))


def test_completions_without_a_reward_get_zero_advantage_and_stay_out_of_their_groups_statistics():
    """Group 1 (0.75, no reward, 0.25, 0.5): mean 0.5 and std 0.25 over the three scored; group 2 has one scored
    completion: nothing to compare, all zero. The batch std is over the four scored rewards alone (its entry of
    ``rewards`` for a left-out completion is never read, NaN included)."""
    rewards = torch.tensor([0.75, float("nan"), 0.25, 0.5, 9.0, 1.0, 7.0, 7.0], dtype=torch.float64)
    scored = torch.tensor([True, False, True, True, False, True, False, False])
    batch_std = math.sqrt((0.125**2 + 0.375**2 + 0.125**2 + 0.375**2) / 3)  # 0.75, 0.25, 0.5, 1.0: mean 0.625
    expected = {
        "group": [0.25 / 0.2501, 0.0, -0.25 / 0.2501, 0.0, 0.0, 0.0, 0.0, 0.0],
        "batch": [0.25 / (batch_std + 1e-4), 0.0, -0.25 / (batch_std + 1e-4), 0.0, 0.0, 0.0, 0.0, 0.0],
        "none": [0.25, 0.0, -0.25, 0.0, 0.0, 0.0, 0.0, 0.0],
    }
    for scale, values in expected.items():
        got = group_advantages(rewards, group_size=4, scale=scale, scored=scored)
        assert got.tolist() == pytest.approx(values, rel=1e-12), scale
    with pytest.raises(ValueError, match="finite"):  # a scored reward must still be a number
        group_advantages(rewards, group_size=4, scored=torch.ones(8, dtype=torch.bool))


def test_group_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="divide"):
        group_advantages(torch.zeros(5), group_size=2)
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(4), group_size=1)
    with pytest.raises(ValueError, match="finite"):
        group_advantages(torch.tensor([1.0, float("nan")]), group_size=2)
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(4), group_size=2, scale="global")


RATIOS = torch.tensor([[1.0, 1.25, 1.5, 1.3], [0.5, 0.9, 1.5, 0.6]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
ADVANTAGES = torch.tensor([1.0, -1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    ("eps_high", "expected_loss", "expected_clip", "expected_grad"),
    [
        # A > 0 clips above 1 + eps_high; A < 0 clips below 1 - eps_low (0.5 -> 0.8); a ratio of 1.5 with A < 0
        # is not clipped (the unclipped branch is the pessimistic one). Clipped tokens have zero gradient.
        (0.2, [[-1.0, -1.2, -1.2, -1.2], [0.8, 0.9, 1.5, 0.8]], 3 / 6, [[-1.0, 0, 0, 0], [0, 0.9, 1.5, 0]]),
        (
            0.28,
            [[-1.0, -1.25, -1.28, -1.28], [0.8, 0.9, 1.5, 0.8]],
            2 / 6,
            [[-1.0, -1.25, 0, 0], [0, 0.9, 1.5, 0]],
        ),
    ],
)
def test_clipped_policy_loss_hand_computed(eps_high, expected_loss, expected_clip, expected_grad):
    logps = RATIOS.log().requires_grad_()
    old = torch.zeros_like(RATIOS)
    for advantages in (ADVANTAGES, ADVANTAGES[:, None].expand(2, 4)):  # per sequence and per token
        per_token, clip_fraction = clipped_policy_loss(logps, old, advantages, MASK, eps_low=0.2, eps_high=eps_high)
        torch.testing.assert_close(per_token, torch.tensor(expected_loss, dtype=torch.float64))
        assert clip_fraction.item() == pytest.approx(expected_clip)
        (grad,) = torch.autograd.grad(per_token.sum(), logps)  # d(-r A)/d logp = -r A when unclipped
        torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=torch.float64))


def test_k3_kl_hand_computed_and_unbiased():
    # p = 0.5, q = 0.25: q/p - log(q/p) - 1 = 0.5 + log 2 - 1
    got = k3_kl(torch.tensor([math.log(0.5), -1.0]), torch.tensor([math.log(0.25), -1.0]))
    assert got.tolist() == pytest.approx([math.log(2) - 0.5, 0.0])
    # its expectation under the policy is KL(policy || reference) exactly
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    expectation = (p * k3_kl(p.log(), q.log())).sum()
    assert expectation.item() == pytest.approx((p * (p / q).log()).sum().item(), rel=1e-12)


PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]])
AGG_MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        ("token_mean", {}, 29 / 6),  # (1 + 2 + 5 + 6 + 7 + 8) / 6
        ("seq_mean", {}, (1.5 + 6.5 + 0.0) / 3),  # the empty sequence counts as 0
        ("dr_grpo", {"max_completion_length": 5}, 29 / (3 * 5)),
    ],
)
def test_aggregate_loss_hand_computed(mode, kwargs, expected):
    assert aggregate_loss(PER_TOKEN, AGG_MASK, mode=mode, **kwargs).item() == pytest.approx(expected)


def test_aggregate_loss_rejects_bad_input():
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate_loss(PER_TOKEN, AGG_MASK, mode="dr_grpo")
    with pytest.raises(ValueError, match="mode"):
        aggregate_loss(PER_TOKEN, AGG_MASK, mode="sum")
    with pytest.raises(ValueError, match="must match"):
        aggregate_loss(PER_TOKEN, AGG_MASK[:, :3])
