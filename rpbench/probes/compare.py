"""Compare the activation frequencies of two runs (RoleMRC appendix H, Figures 5 and 12).

D_l = mean_i |f_b[l, i] - f_a[l, i]| per layer l and evaluation dimension; neurons are
ranked per layer by |f_b - f_a|. Heatmaps show layers x neuron bins (the mean frequency of
consecutive neurons) for run a, run b and b - a.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from rpbench.probes.stats import FrequencyStats

TABLE_FILE = "probe_compare.md"
RESULT_FILE = "probe_compare.json"


def check_comparable(stats_a: FrequencyStats, stats_b: FrequencyStats) -> None:
    """Raise unless both runs probed the same layers, width and settings."""
    if stats_a.layers != stats_b.layers:
        raise ValueError(f"runs probed different layers: {stats_a.layers[:3]}... vs {stats_b.layers[:3]}...")
    if stats_a.width != stats_b.width:
        raise ValueError(f"runs probed different widths: {stats_a.width} vs {stats_b.width}")
    if stats_a.settings != stats_b.settings:
        raise ValueError(f"runs used different probe settings: {stats_a.settings} vs {stats_b.settings}")


def layer_mean_abs_diff(freq_a: torch.Tensor, freq_b: torch.Tensor) -> torch.Tensor:
    """D_l: mean absolute frequency difference per layer, [layers]."""
    return (freq_b - freq_a).abs().mean(dim=1)


def rank_changed_neurons(delta: torch.Tensor, top_n: int) -> list[list[tuple[int, float]]]:
    """Per layer, the `top_n` neurons with the largest |delta| as (index, delta), largest first
    (ties: lower index first)."""
    order = delta.abs().sort(dim=1, descending=True, stable=True).indices[:, :top_n]
    return [[(int(i), float(delta[layer, i])) for i in row] for layer, row in enumerate(order)]


def most_changed_neurons(
    stats_a: FrequencyStats, stats_b: FrequencyStats, top_k: int, dims: Sequence[str] | None = None
) -> dict[str, list[int]]:
    """Per layer key, the `top_k` neurons with the largest |f_b - f_a| summed over `dims`.

    `dims` defaults to every dimension both runs observed.
    """
    check_comparable(stats_a, stats_b)
    dims = list(dims) if dims else sorted(set(stats_a.dims) & set(stats_b.dims))
    if not dims:
        raise ValueError("the two runs share no evaluation dimension")
    score = sum((stats_b.frequencies(d) - stats_a.frequencies(d)).abs() for d in dims)
    ranked = rank_changed_neurons(score, top_k)
    return {layer: [i for i, _ in row] for layer, row in zip(stats_a.layers, ranked, strict=True)}


def bin_neurons(matrix: torch.Tensor, bins: int) -> torch.Tensor:
    """[layers, width] -> [layers, min(bins, width)]: mean over consecutive neuron groups."""
    chunks = torch.tensor_split(matrix, min(bins, matrix.shape[1]), dim=1)
    return torch.stack([c.mean(dim=1) for c in chunks], dim=1)


def plot_heatmap(
    freq_a: torch.Tensor,
    freq_b: torch.Tensor,
    dim: str,
    labels: Sequence[str],
    observations: Sequence[int],
    path: Path,
    bins: int,
) -> None:
    """``heatmap_figure`` saved as png."""
    heatmap_figure(freq_a, freq_b, dim, labels, observations, bins).savefig(path, dpi=120)


def heatmap_figure(
    freq_a: torch.Tensor, freq_b: torch.Tensor, dim: str, labels: Sequence[str], observations: Sequence[int], bins: int
) -> Figure:
    """Three stacked heatmaps (run a, run b, b - a) of layers x neuron bins for dimension ``dim``, each run
    named with its number of observations, each colour bar with what it measures."""
    a, b = bin_neurons(freq_a, bins), bin_neurons(freq_b, bins)
    diff = b - a
    limit = float(diff.abs().max()) or 1.0
    top = float(torch.maximum(a.max(), b.max())) or 1.0
    fig = Figure(figsize=(12, 9), layout="constrained")
    axes = fig.subplots(3, 1)
    panels = [
        (a, f"{labels[0]} ({observations[0]} observations)", "activation frequency", "viridis", 0.0, top),
        (b, f"{labels[1]} ({observations[1]} observations)", "activation frequency", "viridis", 0.0, top),
        (diff, f"{labels[1]} - {labels[0]}", "frequency difference", "bwr", -limit, limit),
    ]
    for ax, (matrix, name, measure, cmap, lo, hi) in zip(axes, panels, strict=True):
        image = ax.imshow(matrix.numpy(), aspect="auto", cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("layer")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.colorbar(image, ax=ax, label=measure)
    axes[-1].set_xlabel(f"neuron bin ({freq_a.shape[1]} neurons in {a.shape[1]} bins)")
    fig.suptitle(f"Activation frequency per layer and neuron bin: dimension {dim}")
    return fig


def markdown_table(result: dict) -> str:
    """D_l per layer and dimension, the heatmaps, then the most changed neurons per layer."""
    dims, labels = result["dims"], result["labels"]
    lines = [
        f"## Probe: activation frequency change, {labels[1]} vs {labels[0]}",
        "",
        f"Settings: {result['settings']}",
        "",
        "Observations per dimension: " + ", ".join(f"{d}: {n[0]} / {n[1]}" for d, n in result["observations"].items()),
        "",
        "### D_l (mean |f_b - f_a| per layer)",
        "",
        "| layer | module | " + " | ".join(dims) + " |",
        "|---|---|" + "---|" * len(dims),
    ]
    for i, layer in enumerate(result["layers"]):
        lines.append(f"| {i} | {layer} | " + " | ".join(f"{result['D_l'][d][i]:.4f}" for d in dims) + " |")
    means = [sum(result["D_l"][d]) / len(result["layers"]) for d in dims]
    lines.append("| mean | | " + " | ".join(f"{m:.4f}" for m in means) + " |")
    for side, names in result["missing_dims"].items():
        if names:
            lines += ["", f"Dimensions observed only in {side}: {', '.join(names)}"]
    lines += ["", "### Heatmaps (layer x neuron bins)", ""]
    lines += [f"![{d}]({result['heatmaps'][d]})" for d in dims]
    for d in dims:
        lines += ["", f"### Most changed neurons: {d}", "", "| layer | neuron (f_b - f_a) |", "|---|---|"]
        for i, layer in enumerate(result["layers"]):
            cells = ", ".join(f"{idx} ({delta:+.3f})" for idx, delta in result["top_neurons"][d][layer])
            lines.append(f"| {i} | {cells} |")
    return "\n".join(lines) + "\n"


def compare_runs(
    stats_a: FrequencyStats,
    stats_b: FrequencyStats,
    out_dir: str | Path,
    labels: Sequence[str] = ("a", "b"),
    top_n: int = 10,
    bins: int = 256,
) -> dict:
    """Compare run b against run a per shared dimension; write heatmaps, table and json.

    Returns a json-ready dict: dims, layers, D_l {dim: [per layer]}, top_neurons
    {dim: {layer: [(index, delta)]}}, observations {dim: [n_a, n_b]}, missing_dims,
    heatmaps {dim: file name} and table (file name), all files under `out_dir`.
    """
    check_comparable(stats_a, stats_b)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dims = sorted(set(stats_a.dims) & set(stats_b.dims))
    if not dims:
        raise ValueError(f"the two runs share no evaluation dimension ({stats_a.dims} vs {stats_b.dims})")
    result = {
        "labels": list(labels),
        "settings": str(stats_a.settings),
        "dims": dims,
        "layers": stats_a.layers,
        "missing_dims": {
            labels[0]: sorted(set(stats_a.dims) - set(dims)),
            labels[1]: sorted(set(stats_b.dims) - set(dims)),
        },
        "observations": {d: [stats_a.num_observations(d), stats_b.num_observations(d)] for d in dims},
        "D_l": {},
        "top_neurons": {},
        "heatmaps": {},
        "table": TABLE_FILE,
    }
    for d in dims:
        freq_a, freq_b = stats_a.frequencies(d), stats_b.frequencies(d)
        result["D_l"][d] = layer_mean_abs_diff(freq_a, freq_b).tolist()
        ranked = rank_changed_neurons(freq_b - freq_a, top_n)
        result["top_neurons"][d] = dict(zip(stats_a.layers, ranked, strict=True))
        name = f"heatmap_{_file_safe(d)}.png"
        plot_heatmap(freq_a, freq_b, d, labels, result["observations"][d], out_dir / name, bins)
        result["heatmaps"][d] = name
    (out_dir / TABLE_FILE).write_text(markdown_table(result))
    (out_dir / RESULT_FILE).write_text(json.dumps(result, indent=2))
    return result


def _file_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
