"""The run's Lightning logger from the ``logger`` config group: one registered ``LoggerKind`` per option
(its typed settings, parsed by ``validate``, and how it is built). A new logger is one registered entry here
plus ``conf/logger/<name>.yaml``."""

from __future__ import annotations

import os
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger

from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings

WANDB_ID_FILE = "wandb_run_id.txt"  # a run resumed in its folder continues the same W&B run
ATTACHED = ("report.md", "metrics.json", "config.yaml")  # the run's results, saved with its W&B run


def keep_earlier_curves(out_dir: Path) -> Path | None:
    """A run resumed in its folder would overwrite metrics.csv: move the earlier one to metrics.<k>.csv."""
    previous = out_dir / "metrics.csv"
    if rank_zero_only.rank != 0 or not previous.exists():
        return None
    kept = out_dir / f"metrics.{1 + len(list(out_dir.glob('metrics.*.csv')))}.csv"
    return previous.rename(kept)


@dataclass(frozen=True, kw_only=True)
class LoggerSettings(Settings):
    """A logger without settings of its own (``logger=none``, ``logger=csv``)."""

    name: str


WANDB_MODES = ("auto", "online", "offline", "disabled")


@dataclass(frozen=True, kw_only=True)
class WandbSettings(LoggerSettings):
    """conf/logger/wandb.yaml."""

    project: str
    entity: str | None
    group: str | None
    job_type: str | None
    mode: str
    tags: tuple[str, ...]

    def problems(self) -> list[Problem]:
        return [] if self.mode in WANDB_MODES else [("mode", f"one of {', '.join(WANDB_MODES)}")]


@dataclass(frozen=True)
class LoggerKind:
    """A ``logger`` option: its settings class and its builder (None: the run logs nowhere)."""

    settings_class: type[LoggerSettings]
    build: Callable[[Any, Path, str, Mapping[str, Any]], Logger | None]


LOGGERS = Registry("logger")


def wandb_group(cfg: WandbSettings, config: Mapping[str, Any]) -> str | None:
    """The configured group, else the sweep's name in a multirun, else the experiment's name (None without)."""
    if cfg.group:
        return cfg.group
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    if hydra.mode == RunMode.MULTIRUN:
        return str(config["sweep_name"])
    return hydra.runtime.choices.get("experiment")


def wandb_job_type(cfg: WandbSettings, config: Mapping[str, Any]) -> str:
    """The configured job type, else probe (a probe runs), eval (objective=none) or train."""
    if cfg.job_type:
        return cfg.job_type
    if config["probe"]["name"] != "none":
        return "probe"
    return "eval" if config["objective"]["name"] == "none" else "train"


def wandb_run_id(out_dir: Path) -> str:
    """The W&B run id kept in the run folder (a new one for a new folder)."""
    stored = out_dir / WANDB_ID_FILE
    if stored.exists():
        return stored.read_text().strip()
    run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    if rank_zero_only.rank == 0:
        stored.write_text(run_id + "\n")
    return run_id


def build_wandb(cfg: WandbSettings, out_dir: Path, run_name: str, config: Mapping[str, Any]) -> WandbLogger:
    import wandb

    if wandb.run is not None:  # left open by a failed earlier job of this process (a local multirun)
        wandb.finish(exit_code=1)
    mode = cfg.mode
    if mode == "auto":
        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    return WandbLogger(
        project=cfg.project,
        entity=cfg.entity,
        group=wandb_group(cfg, config),
        job_type=wandb_job_type(cfg, config),
        name=run_name,
        id=wandb_run_id(out_dir),
        resume="allow",
        save_dir=str(out_dir),
        mode=mode,
        tags=list(cfg.tags),
        config=dict(config),
    )


def build_csv(cfg: LoggerSettings, out_dir: Path, run_name: str, config: Mapping[str, Any]) -> CSVLogger:
    keep_earlier_curves(out_dir)
    return CSVLogger(save_dir=str(out_dir), name="", version="")


LOGGERS.register("none")(LoggerKind(LoggerSettings, lambda cfg, out_dir, run_name, config: None))
LOGGERS.register("csv")(LoggerKind(LoggerSettings, build_csv))
LOGGERS.register("wandb")(LoggerKind(WandbSettings, build_wandb))


def build_logger(cfg: LoggerSettings, out_dir: Path, run_name: str, config: Mapping[str, Any]) -> Logger | None:
    """The run's logger (None: ``logger=none``); ``config`` is the resolved run config it records."""
    return LOGGERS.get(cfg.name).build(cfg, out_dir, run_name, config)


def finish_logger(logger: Logger | None, out_dir: Path) -> None:
    """Attach the run's report, metrics and config to its W&B run and finish that run."""
    if not isinstance(logger, WandbLogger) or rank_zero_only.rank != 0:
        return
    run = logger.experiment
    for name in ATTACHED:
        if (out_dir / name).exists():
            run.save(str(out_dir / name), base_path=str(out_dir), policy="now")
    run.finish()
