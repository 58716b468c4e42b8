"""Hook points on tiny Llama/Qwen2 models, PEFT-wrapped models, removal and tuple handling."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from probe_fixtures import pad_batch, random_sequences, tiny_model

from rpbench.probes import attach, collect_frequencies, find_hook_points, resolve_hook_points
from rpbench.probes.hooks import canonical_name


def hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize(
    "preset, key",
    [
        ("attn_out", "model.layers.{}.self_attn.o_proj"),
        ("mlp_act", "model.layers.{}.mlp.down_proj:input"),
        ("mlp_out", "model.layers.{}.mlp"),
        ("residual", "model.layers.{}"),
    ],
)
def test_presets_resolve_one_point_per_layer(family, preset, key):
    model = tiny_model(family, layers=3)
    points = resolve_hook_points(model, preset)
    assert [p.key for p in points] == [key.format(i) for i in range(3)]


def test_unknown_pattern_is_reported():
    with pytest.raises(ValueError, match="c_proj' matches no module of LlamaForCausalLM"):
        resolve_hook_points(tiny_model(), r"layers\.\d+\.attn\.c_proj")


def test_peft_wrapped_model_has_the_same_keys_and_counts(probe_observation):
    model = tiny_model("llama", seed=3)
    seqs = random_sequences(4, seed=1)
    batch = pad_batch(seqs, "left")
    dims = [["d"] * 4]
    presets = ["attn_out", "mlp_act"]
    plain = [collect_frequencies(model, [batch], dims, probe_observation(modules=[m], position="all")) for m in presets]
    wrapped = get_peft_model(model, LoraConfig(r=4, target_modules=["o_proj", "down_proj"]))
    assert any(n.startswith("base_model.model.") for n, _ in wrapped.named_modules())
    # LoRA B starts at zero, so the wrapped model computes the same activations.
    for preset, expected in zip(presets, plain, strict=True):
        stats = collect_frequencies(wrapped, [batch], dims, probe_observation(modules=[preset], position="all"))
        assert stats.layers == expected.layers
        assert torch.equal(stats.counts["d"], expected.counts["d"])
    assert hook_count(wrapped) == 0


def test_canonical_name_strips_wrappers():
    assert canonical_name("base_model.model.model.layers.0.mlp") == "model.layers.0.mlp"
    assert canonical_name("_orig_mod.model.layers.1") == "model.layers.1"


def test_hooks_are_removed_on_exit_and_on_error():
    model = tiny_model()
    points = resolve_hook_points(model, ["attn_out", "mlp_act", "residual"])
    batch = pad_batch(random_sequences(2), "right")
    seen = []
    with attach(points, lambda key, t: seen.append(key)):
        assert hook_count(model) == len(points) == 6
        model(**batch)
    assert hook_count(model) == 0
    assert seen == [
        f"model.layers.{i}{suffix}" for i in range(2) for suffix in (".self_attn.o_proj", ".mlp.down_proj:input", "")
    ]
    with pytest.raises(RuntimeError, match="boom"), attach(points, lambda key, t: None):
        raise RuntimeError("boom")
    assert hook_count(model) == 0


def test_observed_tensors_match_a_manual_recomputation():
    """The mlp_act input is act(gate(x)) * up(x) of the MLP's own input; residual is [B, T, H]."""
    model = tiny_model("qwen2")
    batch = pad_batch(random_sequences(3, seed=2), "left")
    points = find_hook_points(
        model, ["model.layers.1.mlp:input", "model.layers.1.mlp.down_proj:input", "model.layers.1"]
    )
    captured = {}
    with torch.no_grad(), attach(points, lambda key, t: captured.__setitem__(key, t.clone())):
        model(**batch)
    mlp = model.model.layers[1].mlp
    x = captured["model.layers.1.mlp:input"]
    expected = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
    torch.testing.assert_close(captured["model.layers.1.mlp.down_proj:input"], expected)
    assert captured["model.layers.1"].shape == (*batch["input_ids"].shape, 32)


def test_replacing_a_tuple_output_keeps_the_tuple():
    """The attention module returns (output, weights); an edit replaces only the output."""
    model = tiny_model()
    batch = pad_batch(random_sequences(2), "right")
    returned = []
    with torch.no_grad(), attach(find_hook_points(model, ["model.layers.0.self_attn"]), lambda k, t: t * 0):
        handle = model.model.layers[0].self_attn.register_forward_hook(lambda m, a, out: returned.append(out))
        model(**batch)
        handle.remove()
    (out,) = returned
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0].shape == (*batch["input_ids"].shape, 32)
    assert torch.count_nonzero(out[0]) == 0


def test_missing_key_is_reported():
    with pytest.raises(KeyError, match="no module named 'model.layers.9.self_attn.o_proj'"):
        find_hook_points(tiny_model(), ["model.layers.9.self_attn.o_proj"])
