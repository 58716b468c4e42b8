"""rpbench's config tree (``conf/`` beside the package): model entries by name, for code that loads a
model other than the run's (the server, the R-EMID estimator pair), as typed settings; and a run's whole config
composed outside ``run.py`` (benchmark scripts)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rpbench.core.paths import CONF_DIR
from rpbench.models.settings import ModelSettings


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


def compose_model_config(name: str, overrides: Sequence[str] = ()) -> ModelSettings:
    """The settings of the ``model`` group entry ``name`` of rpbench's config tree, with ``model.*`` overrides."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: compose from its config tree
        cfg = compose(config_name=None, overrides=[f"+model={name}", *overrides])
        return ModelSettings.parse(OmegaConf.to_container(cfg.model, resolve=True), "model")
    return _own_model_entry(name, tuple(overrides))


@functools.cache
def _own_model_entry(name: str, overrides: tuple[str, ...]) -> ModelSettings:
    """``compose_model_config`` from rpbench's own config tree (composed once per name and overrides)."""
    from hydra import compose, initialize_config_dir

    if not (CONF_DIR / "model").is_dir():
        raise FileNotFoundError(
            "rpbench's config tree (conf/model) is not next to the package: give the model's settings"
        )
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name=None, overrides=[f"+model={name}", *overrides])
    return ModelSettings.parse(OmegaConf.to_container(cfg.model, resolve=True), "model")


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
