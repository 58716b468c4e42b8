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

BY_CHOICES = ("value", "magnitude")
POSITION_CHOICES = ("last_prompt", "all")


@dataclass(frozen=True)
class ProbeSettings:
    """What is observed and counted; read from the `probe` config group."""

    modules: tuple[str, ...] = ("attn_out",)
    top_percent: float = 20.0
    by: str = "value"
    position: str = "last_prompt"

    def __post_init__(self):
        if not (isinstance(self.top_percent, (int, float)) and 0 < self.top_percent <= 100):
            raise ValueError(f"probe.top_percent: expected a number in (0, 100], got {self.top_percent!r}")
        if self.by not in BY_CHOICES:
            raise ValueError(f"probe.by: expected one of {BY_CHOICES}, got {self.by!r}")
        if self.position not in POSITION_CHOICES:
            raise ValueError(f"probe.position: expected one of {POSITION_CHOICES}, got {self.position!r}")
        if not self.modules or not all(isinstance(m, str) for m in self.modules):
            raise ValueError(f"probe.modules: expected a preset name or a list of patterns, got {self.modules!r}")

    @classmethod
    def from_cfg(cls, cfg: Mapping) -> ProbeSettings:
        """Settings from a probe config; absent fields take the paper's defaults."""
        modules = cfg.get("modules", cls.modules)
        modules = (modules,) if isinstance(modules, str) else tuple(modules)
        return cls(
            modules=modules,
            top_percent=cfg.get("top_percent", cls.top_percent),
            by=cfg.get("by", cls.by),
            position=cfg.get("position", cls.position),
        )


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
        settings = dict(state["settings"])
        settings["modules"] = tuple(settings["modules"])
        stats = cls(state["layers"], ProbeSettings(**settings))
        stats.counts = {k: v.long() for k, v in state["counts"].items()}
        stats.totals = {k: v.long() for k, v in state["totals"].items()}
        return stats
