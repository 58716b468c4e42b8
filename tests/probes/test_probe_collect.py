"""collect_frequencies on tiny HF decoders: padding invariance and constant memory."""

import pytest
import torch
from probe_fixtures import pad_batch, random_sequences, tiny_model

from rpbench.probes import attach, collect_frequencies, find_hook_points, restrain
from rpbench.probes.collect import last_prompt_index

DIMS = ["knowledge", "style", "nested"]


def dims_for(n: int, offset: int = 0) -> list[list[str]]:
    """Sample i belongs to DIMS[i % 3], every third sample also to "style"."""
    return [[DIMS[(i + offset) % 3]] + (["style"] if (i + offset) % 3 == 0 else []) for i in range(n)]


def test_last_prompt_index_left_and_right():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert last_prompt_index(mask, None).tolist() == [4, 2, 4]
    assert last_prompt_index(mask, torch.tensor([2, 1, 3])).tolist() == [3, 0, 2]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("position", ["last_prompt", "all"])
def test_padded_batches_count_like_single_unpadded_samples(family, position, probe_observation):
    model = tiny_model(family, seed=1)
    seqs = random_sequences(6, seed=4)
    prompt_lengths = torch.tensor([len(s) - 1 for s in seqs])
    dims = dims_for(6)
    cfg = probe_observation(modules=["attn_out"], position=position, top_percent=20)

    singles = [{**pad_batch([s], "right"), "prompt_lengths": prompt_lengths[i : i + 1]} for i, s in enumerate(seqs)]
    reference = collect_frequencies(model, singles, [[d] for d in dims], cfg)
    for side in ("left", "right"):
        batches = [
            {**pad_batch(seqs[:4], side), "prompt_lengths": prompt_lengths[:4]},
            {**pad_batch(seqs[4:], side), "prompt_lengths": prompt_lengths[4:]},
        ]
        stats = collect_frequencies(model, batches, [dims[:4], dims[4:]], cfg)
        assert stats.dims == reference.dims == sorted(DIMS)
        for dim in DIMS:
            assert torch.equal(stats.counts[dim], reference.counts[dim]), (side, dim)
            assert torch.equal(stats.totals[dim], reference.totals[dim])
    for dim in DIMS:
        members = [s for s, d in zip(seqs, dims, strict=True) if dim in d]
        expected = len(members) if position == "last_prompt" else sum(len(s) for s in members)
        assert reference.num_observations(dim) == expected


def test_each_dimension_counts_its_own_samples(probe_observation):
    model = tiny_model("llama", seed=2)
    seqs = random_sequences(6, seed=5)
    dims = dims_for(6)
    stats = collect_frequencies(model, [pad_batch(seqs, "left")], [dims], probe_observation(position="all"))
    for dim in DIMS:
        members = [s for s, d in zip(seqs, dims, strict=True) if dim in d]
        alone = collect_frequencies(
            model, [pad_batch(members, "left")], [[["x"]] * len(members)], probe_observation(position="all")
        )
        assert torch.equal(stats.counts[dim], alone.counts["x"])
        assert stats.num_observations(dim) == sum(len(s) for s in members)


def test_memory_is_independent_of_the_number_of_samples(probe_observation):
    model = tiny_model("qwen2", seed=0, layers=3)

    def stored_elements(n_batches: int) -> tuple[int, int]:
        batches = [pad_batch(random_sequences(4, seed=i), "left") for i in range(n_batches)]
        stats = collect_frequencies(
            model, batches, [dims_for(4, i) for i in range(n_batches)], probe_observation(position="all")
        )
        state = stats.state_dict()
        elements = sum(t.numel() for group in ("counts", "totals") for t in state[group].values())
        return elements, sum(stats.num_observations(d) for d in stats.dims)

    small, seen_small = stored_elements(1)
    large, seen_large = stored_elements(8)
    assert seen_large > 6 * seen_small
    assert small == large == len(DIMS) * (3 * 32 + 3)


def test_model_mode_is_restored_and_hooks_removed(probe_observation):
    model = tiny_model().train()
    collect_frequencies(model, [pad_batch(random_sequences(2), "left")], [["a", "b"]], probe_observation())
    assert model.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_sharded_parameters_are_refused(probe_observation):
    model = tiny_model()
    model.model.layers[0].mlp.up_proj.weight = torch.nn.Parameter(torch.empty(0))
    with pytest.raises(RuntimeError, match="model.layers.0.mlp.up_proj.weight holds no local elements"):
        collect_frequencies(model, [pad_batch(random_sequences(1), "left")], [["a"]], probe_observation())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_model_counts_and_restrains_like_the_cpu_model(probe_observation):
    model = tiny_model("qwen2", seed=3)
    batches = [pad_batch(random_sequences(4, seed=s), "left") for s in (0, 1)]
    dims = [dims_for(4, 0), dims_for(4, 1)]
    on_cpu = collect_frequencies(model, batches, dims, probe_observation(position="all"))
    on_gpu = collect_frequencies(model.cuda(), batches, dims, probe_observation(position="all"))
    for dim in DIMS:
        assert torch.equal(on_gpu.totals[dim], on_cpu.totals[dim])
        assert (on_gpu.counts[dim] - on_cpu.counts[dim]).abs().sum() <= 2  # float near-ties only
    points = find_hook_points(model, ["model.layers.1.mlp.down_proj:input"])
    before, after = [], []
    with (
        torch.no_grad(),
        restrain(model, {points[0].key: [0, 5]}, 0.5),
        attach(points, lambda k, t: before.append(t.clone()), prepend=True),
        attach(points, lambda k, t: after.append(t.clone())),
    ):
        model(**{k: v.cuda() for k, v in batches[0].items()})
    assert torch.equal(after[0][..., [0, 5]], before[0][..., [0, 5]] * 0.5)
    assert torch.equal(after[0][..., 1:5], before[0][..., 1:5])
