"""Padding, packing and token-budget planning."""

import random

import pytest
import torch

from rpbench.data.collate import pack_into_budget, packed_collate, pad_collate, unpad

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
        samples.append(
            {
                "input_ids": [rng.randint(1, 50) for _ in range(n)],
                "labels": [rng.choice([X, rng.randint(1, 50)]) for _ in range(n)],
            }
        )
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


@pytest.mark.parametrize("side", ["right", "left"])
def test_unpad_gives_the_packed_batch_of_the_same_samples(side):
    samples = [
        {"input_ids": [5, 6, 7], "labels": [5, 6, 7], "id": "a"},
        {"input_ids": [8], "labels": [8], "id": "b"},
        {"input_ids": [9, 10, 11, 12], "labels": [-100, -100, 11, 12], "id": "c"},
    ]
    unpadded = unpad(pad_collate(samples, pad_token_id=0, padding_side=side, pad_to_multiple_of=8))
    packed = packed_collate(samples)
    assert set(unpadded) == set(packed)
    for key in ("input_ids", "labels", "position_ids", "cu_seqlens"):
        assert unpadded[key].tolist() == packed[key].tolist(), key
    assert unpadded["max_seqlen"] == packed["max_seqlen"] == 4 and unpadded["id"] == ["a", "b", "c"]
