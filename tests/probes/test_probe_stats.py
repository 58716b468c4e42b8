"""Top-p% counts against hand-computed activations of a toy decoder."""

import pytest
import torch
from torch import nn

from rpbench.core.errors import ConfigError
from rpbench.probes import FrequencyStats, collect_frequencies
from rpbench.probes.stats import top_count, top_percent_mask

# Token embeddings (width 5). With top_percent=40, k=2 neurons per observation.
E = torch.tensor(
    [
        [5.0, 1.0, -9.0, 3.0, 0.0],  # token 0
        [0.0, 2.0, 1.0, -1.0, 7.0],  # token 1
        [-3.0, 4.0, 4.0, 0.0, 1.0],  # token 2: tie at the threshold, both count
        [1.0, 1.0, 1.0, 1.0, 1.0],  # token 3: all tied, all count (also the pad token)
    ]
)


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class ToyAttention(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.o_proj = Scale(factor)

    def forward(self, x):
        return self.o_proj(x), None  # tuple output, like HF attention modules


class ToyLayer(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.self_attn = ToyAttention(factor)

    def forward(self, x):
        out, _ = self.self_attn(x)
        return (x + out,)  # tuple output, like older HF decoder layers


class ToyDecoder(nn.Module):
    """o_proj outputs: layer 0 = E[ids], layer 1 = -6 E[ids]; residuals 2 E and -4 E."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding.from_pretrained(E)
        self.layers = nn.ModuleList([ToyLayer(1.0), ToyLayer(-3.0)])

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h)[0]
        return h


def toy_batches():
    """s1 = [3,1,0,2] with 3 prompt tokens; s2 = [2,1]; s3 = [0,2] left-padded with token 3."""
    batch1 = {
        "input_ids": torch.tensor([[3, 1, 0, 2], [2, 1, 3, 3]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
        "prompt_lengths": torch.tensor([3, 2]),
    }
    batch2 = {"input_ids": torch.tensor([[3, 0, 2]]), "attention_mask": torch.tensor([[0, 1, 1]])}
    dims = [["style", ["style", "knowledge"]], [("knowledge",)]]
    return [batch1, batch2], dims


@pytest.fixture(scope="module")
def run_toy(probe_observation):
    def run_toy(**cfg):
        batches, dims = toy_batches()
        return collect_frequencies(ToyDecoder(), batches, dims, probe_observation(**{"top_percent": 40, **cfg}))

    return run_toy


def test_top_count_floors_and_keeps_one():
    assert top_count(5, 40) == 2
    assert top_count(5, 10) == 1
    assert top_count(10, 70) == 7
    assert top_count(3584, 20) == 716
    assert top_count(4096, 20) == 819


def test_mask_counts_ties_at_threshold():
    mask = top_percent_mask(E, 40, "value")
    assert mask.tolist() == [
        [True, False, False, True, False],
        [False, True, False, False, True],
        [False, True, True, False, False],
        [True] * 5,
    ]


def test_last_prompt_by_value(run_toy):
    # Last prompt tokens: s1 -> token 0, s2 -> token 1, s3 -> token 2.
    # layer 0 ranks E: t0 {0,3}, t1 {1,4}, t2 {1,2}; layer 1 ranks -E: t0 {2,4}, t1 {0,3}, t2 {0,3}.
    stats = run_toy(position="last_prompt", by="value")
    assert stats.layers == ["layers.0.self_attn.o_proj", "layers.1.self_attn.o_proj"]
    assert stats.dims == ["knowledge", "style"]
    assert stats.counts["style"].tolist() == [[1, 1, 0, 1, 1], [1, 0, 1, 1, 1]]
    assert stats.counts["knowledge"].tolist() == [[0, 2, 1, 0, 1], [2, 0, 0, 2, 0]]
    assert stats.num_observations("style") == 2
    assert stats.num_observations("knowledge") == 2
    assert stats.frequencies("knowledge")[1].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]


def test_last_prompt_by_magnitude(run_toy):
    # |E|: t0 {0,2}, t1 {1,4}, t2 {1,2}, identical for both layers.
    stats = run_toy(position="last_prompt", by="magnitude")
    assert stats.counts["style"].tolist() == [[1, 1, 1, 0, 1]] * 2
    assert stats.counts["knowledge"].tolist() == [[0, 2, 1, 0, 1]] * 2


def test_all_real_tokens_by_value(run_toy):
    # style: s1 + s2 real tokens = t3 t1 t0 t2 | t2 t1 (6); knowledge: s2 + s3 = t2 t1 | t0 t2 (4).
    stats = run_toy(position="all", by="value")
    assert stats.counts["style"].tolist() == [[2, 5, 3, 2, 3], [5, 1, 2, 5, 2]]
    assert stats.counts["knowledge"].tolist() == [[1, 3, 2, 1, 1], [3, 0, 1, 3, 1]]
    assert stats.num_observations("style") == 6
    assert stats.num_observations("knowledge") == 4


@pytest.mark.parametrize("modules", [["residual"], [r"layers\.\d+\.self_attn"]])
def test_tuple_outputs_give_the_same_ranking(modules, run_toy):
    # Residuals (2E, -4E) and the attention tuples (E, -6E) rank neurons like o_proj does.
    expected = run_toy(position="all")
    stats = run_toy(position="all", modules=modules)
    assert stats.layers != expected.layers
    for dim in expected.dims:
        assert torch.equal(stats.counts[dim], expected.counts[dim])


def test_bad_dimensions_are_rejected(probe_observation):
    batches, _ = toy_batches()
    with pytest.raises(ValueError, match="batch 0: 2 samples but 1 dimension entries"):
        collect_frequencies(ToyDecoder(), batches, [["style"], ["knowledge"]], probe_observation())
    with pytest.raises(ValueError, match="batch 1, sample 0"):
        collect_frequencies(ToyDecoder(), batches, [["style", "style"], [[]]], probe_observation())
    with pytest.raises(ValueError):  # one dimension list for two batches
        collect_frequencies(ToyDecoder(), batches, [["style", "style"]], probe_observation())


def test_prompt_length_beyond_the_row_is_rejected(probe_observation):
    batches, dims = toy_batches()
    batches[0]["prompt_lengths"] = torch.tensor([3, 4])
    with pytest.raises(ValueError, match="batch row 1: prompt_lengths=4 but the row has 2 real tokens"):
        collect_frequencies(ToyDecoder(), batches, dims, probe_observation())


@pytest.mark.parametrize(
    "field, value", [("top_percent", 0), ("top_percent", 120), ("by", "abs"), ("position", "first")]
)
def test_settings_name_the_bad_field(field, value, probe_observation):
    with pytest.raises(ConfigError, match=rf"probe.{field}=.*{value}.*: expected"):
        probe_observation(**{field: value})


def test_update_rejects_mismatched_width(probe_observation):
    stats = FrequencyStats(["a", "b"], probe_observation())
    stats.update(0, torch.randn(3, 8), torch.ones(1, 3), ["x"])
    with pytest.raises(ValueError, match="layer b has width 6"):
        stats.update(1, torch.randn(3, 6), torch.ones(1, 3), ["x"])
