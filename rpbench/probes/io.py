"""Save and load FrequencyStats in a run directory: probe_stats.pt plus a readable json summary."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rpbench.probes.stats import FrequencyStats

STATS_FILE = "probe_stats.pt"
SUMMARY_FILE = "probe_stats.json"


def save_stats(stats: FrequencyStats, run_dir: str | Path) -> Path:
    """Write `probe_stats.pt` (counts and totals) and `probe_stats.json` (settings, observations)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / STATS_FILE
    torch.save(stats.state_dict(), path)
    summary = {
        "settings": stats.state_dict()["settings"],
        "layers": stats.layers,
        "width": stats.width,
        "observations": {dim: stats.num_observations(dim) for dim in stats.dims},
        "mean_frequency": {dim: float(stats.frequencies(dim).mean()) for dim in stats.dims},
    }
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return path


def load_stats(run_dir: str | Path) -> FrequencyStats:
    """FrequencyStats from a run directory written by `save_stats`."""
    path = Path(run_dir) / STATS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no probe statistics (run the evaluation with probe=topk_freq first)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        return FrequencyStats.from_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{path}: not a probe statistics file ({err})") from err
