"""Neuron restraint scales exactly the chosen neurons by exactly the factor."""

import copy

import pytest
import torch
from probe_fixtures import pad_batch, random_sequences, tiny_model

from rpbench.probes import attach, collect_frequencies, find_hook_points, restrain, save_stats, select_neurons
from rpbench.probes.restraint import DEFAULT_FACTOR


def capture_around(model, keys, batch, neurons, factor):
    """Each hooked tensor before (hook prepended) and after the restraint hook, in one forward."""
    points = find_hook_points(model, keys)
    before, after = {}, {}
    with (
        torch.no_grad(),
        restrain(model, neurons, factor),
        attach(points, lambda k, t: before.__setitem__(k, t.clone()), prepend=True),
        attach(points, lambda k, t: after.__setitem__(k, t.clone())),
    ):
        model(**batch)
    return before, after


@pytest.mark.parametrize("factor", [DEFAULT_FACTOR, 0.5, 0.0])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_only_chosen_neurons_change_by_the_factor(family, factor):
    model = tiny_model(family, seed=5)
    batch = pad_batch(random_sequences(3, seed=6), "left")
    neurons = {
        "model.layers.0.self_attn.o_proj": [3, 17, 30],
        "model.layers.1.self_attn.o_proj": [0],
        "model.layers.1.mlp.down_proj:input": [5, 63],
    }
    before, after = capture_around(model, list(neurons), batch, neurons, factor)
    for key, idx in neurons.items():
        chosen = torch.zeros(before[key].shape[-1], dtype=torch.bool)
        chosen[idx] = True
        assert torch.equal(after[key][..., chosen], before[key][..., chosen] * factor), key
        assert torch.equal(after[key][..., ~chosen], before[key][..., ~chosen]), key
        if factor != 1:
            assert not torch.equal(after[key][..., chosen], before[key][..., chosen])


def test_first_layer_output_against_an_unrestrained_forward():
    model = tiny_model("llama", seed=7)
    batch = pad_batch(random_sequences(2, seed=8), "right")
    key = "model.layers.0.self_attn.o_proj"
    points = find_hook_points(model, [key])
    plain, restrained = {}, {}
    with torch.no_grad():
        with attach(points, lambda k, t: plain.__setitem__(k, t.clone())):
            model(**batch)
        with (
            restrain(model, {key: [1, 2]}, 0.25),
            attach(points, lambda k, t: restrained.__setitem__(k, t.clone())),
        ):
            model(**batch)
    expected = plain[key].clone()
    expected[..., [1, 2]] *= 0.25
    assert torch.equal(restrained[key], expected)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_generation_matches_a_weight_edited_peer():
    """Scaling o_proj output neurons equals scaling the matching rows of the o_proj weight."""
    model = tiny_model("qwen2", seed=9)
    neurons = {"model.layers.0.self_attn.o_proj": [4, 9], "model.layers.1.self_attn.o_proj": [0, 31]}
    factor = 0.1
    peer = copy.deepcopy(model)
    with torch.no_grad():
        for key, idx in neurons.items():
            o_proj = peer.get_submodule(key)
            o_proj.weight[idx] *= factor
            if o_proj.bias is not None:
                o_proj.bias[idx] *= factor
    batch = pad_batch(random_sequences(3, seed=10), "left")
    gen = {"max_new_tokens": 4, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with torch.no_grad():
        plain = model.generate(**batch, **gen)
        with restrain(model, neurons, factor):
            restrained = model.generate(**batch, **gen)
        edited = peer.generate(**batch, **gen)
    assert torch.equal(restrained.sequences, edited.sequences)
    for got, want in zip(restrained.logits, edited.logits, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not all(torch.allclose(a, b) for a, b in zip(plain.logits, restrained.logits, strict=True))


def test_bad_neuron_lists_are_rejected():
    model = tiny_model()
    batch = pad_batch(random_sequences(1), "left")
    with (
        pytest.raises(IndexError, match="o_proj: neuron 32 out of range for width 32"),
        restrain(model, {"model.layers.0.self_attn.o_proj": [32]}),
    ):
        model(**batch)
    with (
        pytest.raises(ValueError, match="non-negative integer indices"),
        restrain(model, {"model.layers.0.self_attn.o_proj": [-1]}),
    ):
        pass
    with (
        pytest.raises(KeyError, match="no module named"),
        restrain(model, {"model.layers.0.attn.o_proj": [1]}),
    ):
        pass
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_select_neurons_from_two_probed_runs(tmp_path, probe_observation):
    batches = [pad_batch(random_sequences(4, seed=11), "left")]
    dims = [["style", "style", "knowledge", "knowledge"]]
    for name, seed in (("sft", 0), ("dpo", 1)):
        save_stats(
            collect_frequencies(tiny_model(seed=seed), batches, dims, probe_observation(position="all")),
            tmp_path / name,
        )
    cfg = {"runs": [str(tmp_path / "sft"), str(tmp_path / "dpo")], "top_k": 3, "dims": ["style"]}
    neurons = select_neurons(cfg)
    assert list(neurons) == ["model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.o_proj"]
    assert all(len(idx) == 3 for idx in neurons.values())
    model = tiny_model()
    with restrain(model, neurons):
        model(**batches[0])
    assert select_neurons({"neurons": {"model.layers.0.mlp": [1, 2]}}) == {"model.layers.0.mlp": [1, 2]}
    with pytest.raises(ValueError, match="probe.runs: expected two run directories"):
        select_neurons({"runs": [str(tmp_path / "sft")]})
    with pytest.raises(ValueError, match="probe.top_k"):
        select_neurons({**cfg, "top_k": 0})
