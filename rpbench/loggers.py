"""The run's Lightning logger from the ``logger`` config group (none, csv, wandb)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger


def keep_earlier_curves(out_dir: Path) -> Path | None:
    """A run resumed in its folder would overwrite metrics.csv: move the earlier one to metrics.<k>.csv."""
    previous = out_dir / "metrics.csv"
    if rank_zero_only.rank != 0 or not previous.exists():
        return None
    kept = out_dir / f"metrics.{1 + len(list(out_dir.glob('metrics.*.csv')))}.csv"
    return previous.rename(kept)


def build_logger(cfg: Mapping[str, Any], out_dir: Path, run_name: str, config: Mapping[str, Any]) -> Logger | None:
    name = str(cfg.get("name", "none"))
    if name == "none":
        return None
    if name == "csv":
        keep_earlier_curves(out_dir)
        return CSVLogger(save_dir=str(out_dir), name="", version="")
    if name == "wandb":
        mode = str(cfg.get("mode", "auto"))
        if mode == "auto":
            mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        return WandbLogger(
            project=cfg.get("project", "rpbench"),
            entity=cfg.get("entity"),
            name=run_name,
            save_dir=str(out_dir),
            mode=mode,
            tags=list(cfg.get("tags", [])),
            config=dict(config),
        )
    raise ValueError(f"logger={name!r}: choose none, csv or wandb")
