"""Padding, packing, token-budget planning and the DDP batch sampler."""

import random

import pytest
import torch
from torch.utils.data import DataLoader

from rpbench.data.collate import (
    LossFreeIndex,
    RenderedSamples,
    TokenBudgetBatchSampler,
    pack_into_budget,
    packed_collate,
    pad_collate,
)

X = -100
SAMPLES = [
    {"input_ids": [11, 12, 13], "labels": [11, X, 13], "id": "a"},
    {"input_ids": [21], "labels": [21], "id": "b"},
    {"input_ids": [31, 32], "labels": [X, 32], "id": "c"},
]


def test_pad_collate_right():
    batch = pad_collate(SAMPLES, pad_token_id=0)
    assert batch["input_ids"].tolist() == [[11, 12, 13], [21, 0, 0], [31, 32, 0]]
    assert batch["labels"].tolist() == [[X, X, 13], [X, X, X], [X, 32, X]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0], [0, 1, 1]]
    assert batch["id"] == ["a", "b", "c"]


def test_pad_collate_left_to_multiple():
    batch = pad_collate(SAMPLES, pad_token_id=0, padding_side="left", pad_to_multiple_of=4)
    assert batch["input_ids"].tolist() == [[0, 11, 12, 13], [0, 0, 0, 21], [0, 0, 31, 32]]
    assert batch["labels"].tolist() == [[X, X, X, 13], [X, X, X, X], [X, X, X, 32]]
    assert batch["attention_mask"].tolist() == [[0, 1, 1, 1], [0, 0, 0, 1], [0, 0, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 0, 1, 2], [0, 0, 0, 0], [0, 0, 0, 1]]


def test_packed_collate():
    batch = packed_collate(SAMPLES)
    assert batch["input_ids"].tolist() == [[11, 12, 13, 21, 31, 32]]
    assert batch["labels"].tolist() == [[X, X, 13, X, X, 32]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1]]
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["cu_seqlens"].tolist() == [0, 3, 4, 6]
    assert batch["max_seqlen"] == 3
    assert batch["id"] == ["a", "b", "c"]
    assert "attention_mask" not in batch


def test_packed_targets_never_cross_samples():
    """Under the causal shift, each target (labels[t], predicted at t-1) lies in the sample of t-1,
    and the targets are exactly each sample's own shifted labels."""
    rng = random.Random(0)
    samples = []
    for _ in range(20):
        n = rng.randint(1, 9)
        samples.append({"input_ids": [rng.randint(1, 50) for _ in range(n)],
                        "labels": [rng.choice([X, rng.randint(1, 50)]) for _ in range(n)]})
    batch = packed_collate(samples)
    sample_of = torch.repeat_interleave(torch.arange(len(samples)), torch.diff(batch["cu_seqlens"]).long())
    targets = batch["labels"][0, 1:]
    labelled = (targets != X).nonzero().squeeze(-1)
    assert (sample_of[labelled] == sample_of[labelled + 1]).all()
    expected = [label for sample in samples for label in sample["labels"][1:] if label != X]
    assert targets[labelled].tolist() == expected


def test_collate_rejects_mismatched_labels_naming_the_sample():
    bad = [SAMPLES[0], {"input_ids": [1, 2], "labels": [1], "id": "broken"}]
    for collate in (packed_collate, lambda s: pad_collate(s, 0)):
        with pytest.raises(ValueError, match=r"sample 1 \(id 'broken'\).*'labels'"):
            collate(bad)


def _random_lengths(seed: int, n: int, budget: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(1, budget) if rng.random() < 0.1 else rng.randint(1, budget // 4) for _ in range(n)]


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_pack_into_budget_respects_budget_and_covers_once(seed):
    budget = 100
    lengths = _random_lengths(3, 300, budget)
    batches = pack_into_budget(lengths, budget, seed=seed)
    assert all(sum(lengths[i] for i in batch) <= budget for batch in batches)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    # First/best-fit decreasing guarantee: at most 11/9 OPT + 1 bins, and OPT >= total / budget.
    assert len(batches) <= 11 / 9 * (sum(lengths) / budget) + 1
    assert batches == pack_into_budget(lengths, budget, seed=seed)


def test_pack_into_budget_seed_changes_the_order():
    lengths = _random_lengths(4, 200, 64)
    assert pack_into_budget(lengths, 64, seed=0) != pack_into_budget(lengths, 64, seed=1)


def test_pack_into_budget_rejects_a_too_long_sample():
    with pytest.raises(ValueError, match=r"sample 2 has 11 tokens.*max_tokens_per_batch=10"):
        pack_into_budget([3, 10, 11, 2], 10)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
def test_sampler_gives_every_rank_the_same_count_and_each_sample_once(world_size):
    lengths = _random_lengths(5, 101, 64)
    real = []
    for epoch in (0, 1):
        per_rank = []
        for rank in range(world_size):
            sampler = TokenBudgetBatchSampler(lengths, 64, seed=3, num_replicas=world_size, rank=rank)
            sampler.set_epoch(epoch)
            per_rank.append(list(sampler))
            assert len(per_rank[-1]) == len(sampler)
        assert len({len(batches) for batches in per_rank}) == 1
        indices = [i for batches in per_rank for batch in batches for i in batch]
        real.append(sorted(i for i in indices if not isinstance(i, LossFreeIndex)))
        assert real[-1] == list(range(len(lengths)))
        repeated = [batch for batches in per_rank for batch in batches if isinstance(batch[0], LossFreeIndex)]
        assert all(isinstance(i, LossFreeIndex) for batch in repeated for i in batch)
        assert len(repeated) == len(per_rank[0]) * world_size - len(pack_into_budget(lengths, 64))


def test_sampler_epochs_reshuffle_deterministically():
    lengths = _random_lengths(6, 80, 64)

    def epoch_batches(epoch):
        sampler = TokenBudgetBatchSampler(lengths, 64, seed=0)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert epoch_batches(0) == epoch_batches(0)
    assert epoch_batches(0) != epoch_batches(1)


def test_loss_free_repeats_carry_no_labels_through_a_dataloader():
    samples = [{"input_ids": list(range(1, n + 1)), "labels": list(range(1, n + 1)), "id": n} for n in (5, 6, 7)]
    dataset = RenderedSamples(samples)
    # 3 samples of 5-7 tokens, budget 8 -> 3 batches; 2 ranks -> rank 1 gets one repeat.
    sampler = TokenBudgetBatchSampler(dataset.lengths(), 8, shuffle=False, num_replicas=2, rank=1)
    batches = list(DataLoader(dataset, batch_sampler=sampler, collate_fn=packed_collate))
    assert len(batches) == 2
    assert (batches[0]["labels"] != X).any()
    assert (batches[1]["labels"] == X).all()
    assert batches[1]["input_ids"].numel() > 0
