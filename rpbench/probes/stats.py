"""Streaming top-p% activation frequencies (RoleMRC section 7, appendix H).

For every observation (one token of one sample) and every probed layer, the neurons whose
score is at or above the observation's top-p% threshold are counted. The threshold is the
k-th largest score with k = max(1, floor(width * p / 100)); ties at the threshold all count.
The score is the activation (`by="value"`) or its absolute value (`by="magnitude"`).
Frequencies are f_i = N_i / N_total per evaluation dimension, layer and neuron. Only counts
are kept: memory is O(layers x width) per dimension whatever the number of samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from rpbench.core.typed import Problem, Settings

BY_CHOICES = ("value", "magnitude")
POSITION_CHOICES = ("last_prompt", "all")


@dataclass(frozen=True, kw_only=True)
class ProbeSettings(Settings):
    """What is observed and counted (``probe=topk_freq``'s ``observation()``; saved with the statistics)."""

    modules: tuple[str, ...]  # hook presets or module-name patterns
    top_percent: float
    by: str
    position: str

    def problems(self) -> list[Problem]:
        found: list[Problem] = [] if 0 < self.top_percent <= 100 else [("top_percent", "a percentage in (0, 100]")]
        if self.by not in BY_CHOICES:
            found.append(("by", f"one of {', '.join(BY_CHOICES)}"))
        if self.position not in POSITION_CHOICES:
            found.append(("position", f"one of {', '.join(POSITION_CHOICES)}"))
        if not self.modules:
            found.append(("modules", "a preset name or a non-empty list of module-name patterns"))
        return found


def top_count(width: int, top_percent: float) -> int:
    """Number of neurons in the top `top_percent`% of `width` (at least one)."""
    return max(1, math.floor(width * top_percent / 100 + 1e-9))


def top_percent_mask(acts: torch.Tensor, top_percent: float, by: str) -> torch.Tensor:
    """Boolean mask [N, H]: per row, neurons at or above that row's top-p% threshold."""
    scores = acts.float().abs() if by == "magnitude" else acts.float()
    k = top_count(scores.shape[-1], top_percent)
    threshold = scores.topk(k, dim=-1).values[..., -1:]
    return scores >= threshold


class FrequencyStats:
    """Per dimension: counts [layers, width] of top-p% hits and totals [layers] of observations."""

    def __init__(self, layers: Sequence[str], settings: ProbeSettings):
        if not layers:
            raise ValueError("FrequencyStats needs at least one layer")
        self.layers = list(layers)
        self.settings = settings
        self.counts: dict[str, torch.Tensor] = {}
        self.totals: dict[str, torch.Tensor] = {}

    @property
    def dims(self) -> list[str]:
        return sorted(self.counts)

    @property
    def width(self) -> int | None:
        return next(iter(self.counts.values())).shape[1] if self.counts else None

    def update(self, layer: int, acts: torch.Tensor, membership: torch.Tensor, dims: Sequence[str]) -> None:
        """Count one batch of observations for one layer.

        acts: [N, H] activations, one row per observation.
        membership: [D, N] 0/1, row d marks the observations belonging to dims[d].
        """
        if acts.dim() != 2 or membership.shape != (len(dims), acts.shape[0]):
            raise ValueError(
                f"layer {self.layers[layer]}: acts {tuple(acts.shape)} and membership "
                f"{tuple(membership.shape)} do not describe {len(dims)} dims x N observations"
            )
        if self.width is not None and acts.shape[1] != self.width:
            raise ValueError(
                f"layer {self.layers[layer]} has width {acts.shape[1]}, other probed layers {self.width}; "
                "probe modules must share one width"
            )
        hits = (
            membership.to(acts.device, torch.float32)
            @ top_percent_mask(acts, self.settings.top_percent, self.settings.by).float()
        )
        hits = hits.round().long().cpu()
        seen = membership.sum(dim=1).long().cpu()
        for d, dim in enumerate(dims):
            if dim not in self.counts:
                self.counts[dim] = torch.zeros(len(self.layers), acts.shape[1], dtype=torch.long)
                self.totals[dim] = torch.zeros(len(self.layers), dtype=torch.long)
            self.counts[dim][layer] += hits[d]
            self.totals[dim][layer] += seen[d]

    def frequencies(self, dim: str) -> torch.Tensor:
        """f = N_i / N_total as float64 [layers, width]."""
        if dim not in self.counts:
            raise KeyError(f"no observations for dimension {dim!r}; have {self.dims}")
        totals = self.totals[dim]
        if not torch.all(totals == totals[0]) or totals[0] == 0:
            raise ValueError(f"dimension {dim!r}: layers saw unequal or zero observations {totals.tolist()}")
        return self.counts[dim].double() / totals[0].item()

    def num_observations(self, dim: str) -> int:
        return int(self.totals[dim][0])

    def state_dict(self) -> dict:
        return {
            "layers": list(self.layers),
            "settings": asdict(self.settings),
            "counts": dict(self.counts),
            "totals": dict(self.totals),
        }

    @classmethod
    def from_state_dict(cls, state: Mapping) -> FrequencyStats:
        stats = cls(state["layers"], ProbeSettings.parse(state["settings"], "settings"))
        stats.counts = {k: v.long() for k, v in state["counts"].items()}
        stats.totals = {k: v.long() for k, v in state["totals"].items()}
        return stats
