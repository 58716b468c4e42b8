"""D_l, neuron rankings, heatmaps and tables for two runs; stats files; probe configs."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from probe_fixtures import pad_batch, random_sequences, tiny_model

from rpbench.probes import (
    FrequencyStats,
    ProbeSettings,
    collect_frequencies,
    compare_runs,
    load_stats,
    most_changed_neurons,
    save_stats,
)
from rpbench.probes.compare import bin_neurons, heatmap_figure
from rpbench.probes.stage import FrequencySettings

CONF = Path(__file__).parents[2] / "conf" / "probe"


@pytest.fixture(scope="module")
def hand_stats(probe_observation):
    def hand_stats(counts: dict[str, list[list[int]]], totals: dict[str, int]) -> FrequencyStats:
        stats = FrequencyStats(["L0", "L1"], probe_observation())
        stats.counts = {d: torch.tensor(c) for d, c in counts.items()}
        stats.totals = {d: torch.tensor([n, n]) for d, n in totals.items()}
        return stats

    return hand_stats


def test_layer_differences_and_rankings_by_hand(tmp_path, hand_stats):
    # f_a = counts / 4, f_b = counts / 2.
    a = hand_stats({"style": [[4, 0, 2, 1], [0, 0, 0, 0]], "only_a": [[1, 1, 1, 1]] * 2}, {"style": 4, "only_a": 1})
    b = hand_stats({"style": [[1, 1, 1, 0], [0, 2, 0, 1]]}, {"style": 2})
    # layer 0: f_a = [1, 0, .5, .25], f_b = [.5, .5, .5, 0] -> |d| = [.5, .5, 0, .25], D = 1.25 / 4
    # layer 1: f_a = 0, f_b = [0, 1, 0, .5] -> D = 1.5 / 4
    result = compare_runs(a, b, tmp_path, labels=("sft", "dpo"), top_n=2, bins=2)
    assert result["dims"] == ["style"]
    assert result["missing_dims"] == {"sft": ["only_a"], "dpo": []}
    assert result["D_l"]["style"] == [0.3125, 0.375]
    assert result["observations"] == {"style": [4, 2]}
    assert result["top_neurons"]["style"]["L0"] == [(0, -0.5), (1, 0.5)]
    assert result["top_neurons"]["style"]["L1"] == [(1, 1.0), (3, 0.5)]
    table = (tmp_path / "probe_compare.md").read_text()
    assert "| 0 | L0 | 0.3125 |" in table and "| 1 | L1 | 0.3750 |" in table
    assert "| mean | | 0.3438 |" in table
    assert "| 1 | 1 (+1.000), 3 (+0.500) |" in table
    assert "only in sft: only_a" in table
    assert json.loads((tmp_path / "probe_compare.json").read_text())["D_l"] == result["D_l"]
    assert most_changed_neurons(a, b, top_k=1) == {"L0": [0], "L1": [1]}


def test_the_heatmaps_name_the_dimension_each_run_with_its_observations_and_what_each_colour_measures():
    freq_a, freq_b = torch.zeros(3, 8), torch.ones(3, 8) / 2
    fig = heatmap_figure(freq_a, freq_b, "style", ("sft", "dpo"), (4, 5), bins=4)
    heatmaps = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in heatmaps] == ["sft (4 observations)", "dpo (5 observations)", "dpo - sft"]
    assert [ax.get_ylabel() for ax in heatmaps] == ["layer"] * 3
    assert heatmaps[-1].get_xlabel() == "neuron bin (8 neurons in 4 bins)"
    bars = [ax.get_ylabel() for ax in fig.axes if ax not in heatmaps]
    assert bars == ["activation frequency", "activation frequency", "frequency difference"]
    assert fig.get_suptitle() == "Activation frequency per layer and neuron bin: dimension style"


def test_bin_neurons_means_consecutive_groups():
    matrix = torch.tensor([[1.0, 3.0, 5.0, 7.0, 9.0]])
    assert bin_neurons(matrix, 2).tolist() == [[3.0, 8.0]]
    assert bin_neurons(matrix, 10).tolist() == [[1.0, 3.0, 5.0, 7.0, 9.0]]


def test_incomparable_runs_are_rejected(tmp_path, probe_observation, hand_stats):
    a = hand_stats({"s": [[1, 0], [0, 1]]}, {"s": 1})
    b = FrequencyStats(["L0", "L1"], probe_observation(top_percent=10))
    b.counts, b.totals = a.counts, a.totals
    with pytest.raises(ValueError, match="different probe settings"):
        compare_runs(a, b, tmp_path)
    c = hand_stats({"t": [[1, 0], [0, 1]]}, {"t": 1})
    with pytest.raises(ValueError, match="share no evaluation dimension"):
        compare_runs(a, c, tmp_path)


@pytest.mark.slow
def test_two_tiny_runs_end_to_end(tmp_path, probe_observation):
    # Run b is run a's model with the last layer's attention output negated. The hook points before it see the
    # same activations (D_l = 0 exactly); at the last one each observation's top 20% (6 of 32 neurons) turns into
    # its bottom 20%, so a dimension probed on a single prompt differs in 12 of 32 neurons: D_l = 12/32.
    batches = [pad_batch(random_sequences(4, seed=s), "left") for s in (20, 21)]
    dims = [["solo", ["style", "knowledge"], "style", "nested"], ["nested"] * 4]
    cfg = probe_observation()  # conf/probe/topk_freq.yaml's
    sft, dpo = tiny_model("qwen2", seed=0, layers=3), tiny_model("qwen2", seed=0, layers=3)
    with torch.no_grad():
        dpo.model.layers[-1].self_attn.o_proj.weight.neg_()
    for name, model in (("sft", sft), ("dpo", dpo)):
        save_stats(collect_frequencies(model, batches, dims, cfg), tmp_path / name)
    out = tmp_path / "compare"
    result = compare_runs(load_stats(tmp_path / "sft"), load_stats(tmp_path / "dpo"), out, labels=("sft", "dpo"))

    assert result["dims"] == ["knowledge", "nested", "solo", "style"]
    for dim in ("knowledge", "solo"):  # one prompt each
        assert result["D_l"][dim] == [0.0, 0.0, 12 / 32]
    for dim in ("nested", "style"):  # several prompts: overlaps between prompts can only lower the last layer's D_l
        assert result["D_l"][dim][:2] == [0.0, 0.0] and 0 < result["D_l"][dim][2] <= 12 / 32
    for dim in result["dims"]:
        png = out / result["heatmaps"][dim]
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            assert image.format == "PNG" and image.size[0] > 500
    table = (out / result["table"]).read_text()
    assert table.count("## Most changed neurons") == 4
    assert "model.layers.2.self_attn.o_proj" in table
    summary = json.loads((tmp_path / "sft" / "probe_stats.json").read_text())
    assert summary["observations"] == {"knowledge": 1, "nested": 5, "solo": 1, "style": 2}
    assert summary["settings"]["top_percent"] == 20


def test_stats_round_trip(tmp_path, probe_observation):
    stats = collect_frequencies(
        tiny_model(),
        [pad_batch(random_sequences(3), "right")],
        [["a", "b", ["a", "b"]]],
        probe_observation(by="magnitude"),
    )
    save_stats(stats, tmp_path)
    loaded = load_stats(tmp_path)
    assert loaded.layers == stats.layers and loaded.settings == stats.settings
    assert all(torch.equal(loaded.counts[d], stats.counts[d]) for d in stats.dims)
    assert all(torch.equal(loaded.totals[d], stats.totals[d]) for d in stats.dims)
    with pytest.raises(FileNotFoundError, match="no probe statistics"):
        load_stats(tmp_path / "missing")


def test_probe_configs_are_valid():
    names = sorted(p.stem for p in CONF.glob("*.yaml"))
    assert names == ["compare", "none", "restraint", "topk_freq"]
    cfgs = {n: OmegaConf.load(CONF / f"{n}.yaml") for n in names}
    assert all(cfgs[n].name == n for n in names)
    observed = FrequencySettings.parse(OmegaConf.to_container(cfgs["topk_freq"]), "probe").observation()
    assert observed == ProbeSettings(modules=("attn_out",), top_percent=20.0, by="value", position="last_prompt")
    assert list(cfgs["compare"].runs) == [] and cfgs["compare"].bins > 0
    assert cfgs["restraint"].factor == pytest.approx(1 - 1e-6)
