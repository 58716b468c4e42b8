"""A Hydra callback that gathers every run's metrics.json of a multirun into summary.{csv,md}."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {"a/b/c": scalar}; lists are left out (per-record detail is not summary material)."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}/"))
        return flat
    if isinstance(tree, (int, float, str, bool)) or tree is None:
        return {prefix.rstrip("/"): tree}
    return {}


def summarize(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per run folder holding a metrics.json, with the run's overrides; writes summary.csv/md."""
    rows = []
    for metrics in sorted(sweep_dir.glob("*/metrics.json")):
        overrides_file = metrics.parent / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.exists() else []
        rows.append(
            {
                "run": metrics.parent.name,
                "overrides": " ".join(overrides or []),
                **flatten(json.loads(metrics.read_text())),
            }
        )
    if not rows:
        return rows
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(sweep_dir / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    shown = [c for c in columns if c in ("run", "overrides") or c.endswith(("/mean", "after/loss", "after/perplexity"))]
    lines = ["| " + " | ".join(shown) + " |", "|" + " --- |" * len(shown)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in shown) + " |" for row in rows]
    (sweep_dir / "summary.md").write_text("\n".join(lines) + "\n")
    return rows


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        summarize(Path(config.hydra.sweep.dir))
