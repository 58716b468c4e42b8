"""rpbench's config tree (``conf/`` beside the package): model entries by name, for code that loads a
model other than the run's (the server, the R-EMID estimator pair); the run's own model config; and a run's
whole config composed outside ``run.py`` (benchmark scripts)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.core.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def model_entries() -> list[str]:
    """The names of the ``model`` group's entries."""
    return sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))


def model_options() -> list[str]:
    """The entries of the ``model`` config group as the running Hydra app sees them (its search path's plugins
    included); outside one, rpbench's own (``model_entries``)."""
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        return model_entries()
    return sorted(GlobalHydra.instance().config_loader().get_group_options("model"))


def compose_model_config(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The ``model`` group entry ``name`` of rpbench's config tree, with ``model.*`` overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"+model={name}", *overrides]
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: compose from its config tree
        cfg = compose(config_name=None, overrides=overrides)
    else:
        if not (CONF_DIR / "model").is_dir():
            raise FileNotFoundError(
                "rpbench's config tree (conf/model) is not next to the package; "
                "pass a model config mapping instead of a name"
            )
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=None, overrides=overrides)
    return OmegaConf.to_container(cfg.model, resolve=True)  # type: ignore[return-value]


def model_config(cfg: DictConfig) -> dict[str, Any]:
    """The run's ``model`` group resolved, pointed at an earlier run's saved model when ``init_from`` is set."""
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    if cfg.get("init_from"):
        saved = Path(str(cfg.init_from)) / "model"
        if not saved.is_dir():
            raise ConfigError(f"init_from={cfg.init_from}: no saved model folder 'model' in it")
        model_cfg["name_or_path"] = str(saved)
    return model_cfg


def compose_run_config(overrides: Sequence[str], out_dir: Path) -> DictConfig:
    """The config ``python run.py <overrides>`` composes, its run folder ``out_dir`` (``paths.output_dir``
    reads it from Hydra's runtime config, set here as run.py's app sets it), without the ``hydra`` node."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra.run.dir={out_dir}", *overrides], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(out_dir)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg
