"""Neuron-level restraint (RoleMRC Table 6): scale chosen neurons by a factor during generation.

Neurons are given as {hook key: [neuron index]} (keys as in FrequencyStats.layers, e.g.
"model.layers.3.self_attn.o_proj" or "model.layers.3.mlp.down_proj:input"), either
explicitly or as the top-k most changed neurons per layer between two probed runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from rpbench.probes.compare import most_changed_neurons
from rpbench.probes.hooks import attach, find_hook_points
from rpbench.probes.io import load_stats

DEFAULT_FACTOR = 1 - 1e-6


def _validated(neurons: Mapping[str, Sequence[int]]) -> dict[str, torch.Tensor]:
    if not neurons:
        raise ValueError("probe.neurons: expected {module key: [neuron index, ...]}, got nothing")
    index = {}
    for key, idx in neurons.items():
        idx = list(idx)
        if not idx or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in idx):
            raise ValueError(f"probe.neurons[{key!r}]: expected non-negative integer indices, got {idx!r}")
        index[str(key)] = torch.tensor(sorted(set(idx)))
    return index


@contextmanager
def restrain(model: nn.Module, neurons: Mapping[str, Sequence[int]], factor: float = DEFAULT_FACTOR) -> Iterator[None]:
    """Within the block, every forward multiplies the chosen neurons of each hooked tensor by `factor`."""
    index = _validated(neurons)
    points = find_hook_points(model, index)

    def scale(key: str, tensor: torch.Tensor) -> torch.Tensor:
        idx = index[key]
        if int(idx[-1]) >= tensor.shape[-1]:
            raise IndexError(f"{key}: neuron {int(idx[-1])} out of range for width {tensor.shape[-1]}")
        out = tensor.clone()
        idx = idx.to(out.device)
        out[..., idx] = out[..., idx] * factor
        return out

    with attach(points, scale):
        yield


def select_neurons(cfg: Mapping) -> dict[str, list[int]]:
    """Neurons to restrain from the probe config: `neurons` explicitly, or the `top_k` most
    changed per layer between `runs: [a, b]` (over `dims`, default all shared dimensions)."""
    explicit = cfg.get("neurons")
    runs = list(cfg.get("runs") or [])
    if explicit and runs:
        raise ValueError("probe: give either probe.neurons or probe.runs, not both")
    if explicit:
        return {str(k): [int(i) for i in v] for k, v in explicit.items()}
    if len(runs) != 2:
        raise ValueError(f"probe.runs: expected two run directories [a, b], got {runs!r}")
    top_k = cfg["top_k"]
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"probe.top_k: expected a positive integer, got {top_k!r}")
    dims = cfg.get("dims")
    return most_changed_neurons(load_stats(runs[0]), load_stats(runs[1]), top_k, list(dims) if dims else None)
