"""The run's Lightning logger from the ``logger`` config group: one registered ``LoggerKind`` per option
(its typed settings, parsed by ``validate``, and how it is built). A new logger is one registered entry here
plus ``conf/logger/<name>.yaml``."""

from __future__ import annotations

import importlib.util
import os
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings

WANDB_ID_FILE = "wandb_run_id.txt"  # a run resumed in its folder continues the same W&B run
ATTACHED = ("report.md", "metrics.json", "config.yaml")  # the run's results, saved with its W&B or MLflow run
TENSORBOARD_DIR = "tensorboard"  # the event files, in the run folder
MLFLOW_DIR = "mlruns"  # MLflow's local file store, in the run folder, unless logger.tracking_uri names another


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


@dataclass(frozen=True, kw_only=True)
class TensorBoardSettings(LoggerSettings):
    """conf/logger/tensorboard.yaml."""

    default_hp_metric: bool


@dataclass(frozen=True, kw_only=True)
class MLflowSettings(LoggerSettings):
    """conf/logger/mlflow.yaml."""

    experiment_name: str
    tracking_uri: str | None


@dataclass(frozen=True)
class LoggerKind:
    """A ``logger`` option: its settings class, its builder (None: the run logs nowhere) and, for a logger
    whose package rpbench does not install, that package's module and the extra that installs it."""

    settings_class: type[LoggerSettings]
    build: Callable[[Any, Path, str, Mapping[str, Any]], Logger | None]
    needs: tuple[str, str] | None = None


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


def build_tensorboard(
    cfg: TensorBoardSettings, out_dir: Path, run_name: str, config: Mapping[str, Any]
) -> TensorBoardLogger:
    return TensorBoardLogger(
        save_dir=str(out_dir), name=TENSORBOARD_DIR, version="", default_hp_metric=cfg.default_hp_metric
    )


def build_mlflow(cfg: MLflowSettings, out_dir: Path, run_name: str, config: Mapping[str, Any]) -> MLFlowLogger:
    """An MLflow run named after the run, its parameters the resolved config (values cut at 250 characters).
    Without ``tracking_uri``, a file store in the run folder: MLflow 3 keeps that backend in maintenance mode
    and refuses it unless ``MLFLOW_ALLOW_FILE_STORE`` is set, so it is set here (a database or server URI
    needs nothing)."""
    if cfg.tracking_uri is None:
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    logger = MLFlowLogger(
        experiment_name=cfg.experiment_name,
        run_name=run_name,
        tracking_uri=cfg.tracking_uri,
        save_dir=str(out_dir / MLFLOW_DIR),
    )
    logger.log_hyperparams(dict(config))
    return logger


LOGGERS.register("none")(LoggerKind(LoggerSettings, lambda cfg, out_dir, run_name, config: None))
LOGGERS.register("csv")(LoggerKind(LoggerSettings, build_csv))
LOGGERS.register("wandb")(LoggerKind(WandbSettings, build_wandb))
LOGGERS.register("tensorboard")(LoggerKind(TensorBoardSettings, build_tensorboard, ("tensorboard", "tensorboard")))
LOGGERS.register("mlflow")(LoggerKind(MLflowSettings, build_mlflow, ("mlflow", "mlflow")))


def missing_package(kind: LoggerKind) -> str | None:
    """What to install for ``kind`` when its package is absent (None: nothing)."""
    if kind.needs is None or importlib.util.find_spec(kind.needs[0]) is not None:
        return None
    module, extra = kind.needs
    return f"the {module} package is not installed: pip install -e '.[{extra}]'"


def build_logger(cfg: LoggerSettings, out_dir: Path, run_name: str, config: Mapping[str, Any]) -> Logger | None:
    """The run's logger (None: ``logger=none``); ``config`` is the resolved run config it records."""
    return LOGGERS.get(cfg.name).build(cfg, out_dir, run_name, config)


def finish_logger(logger: Logger | None, out_dir: Path) -> None:
    """Attach the run's report, metrics and config to its W&B or MLflow run and finish that run; flush the
    TensorBoard events evaluation wrote after training."""
    if logger is None or rank_zero_only.rank != 0:
        return
    attached = [out_dir / name for name in ATTACHED if (out_dir / name).exists()]
    if isinstance(logger, WandbLogger):
        run = logger.experiment
        for path in attached:
            run.save(str(path), base_path=str(out_dir), policy="now")
        run.finish()
    elif isinstance(logger, MLFlowLogger):
        for path in attached:
            logger.experiment.log_artifact(logger.run_id, str(path))
        logger.finalize("success")
    elif isinstance(logger, TensorBoardLogger):
        logger.finalize("success")
