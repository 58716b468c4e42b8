"""Command-line overrides checked before Hydra runs: a key the composed config does not have (``objective.lrr=1e-5``)
is answered at once with the keys there are and the closest one ("did you mean objective.lr?"), where Hydra
would first suggest adding it (``+objective.lrr``) and rpbench would refuse that afterwards."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

from rpbench.core.paths import CONF_DIR

FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-path", "-cp", "--info", "-i"}


def override_arguments(args: Sequence[str]) -> list[str]:
    """The Hydra overrides among command-line arguments (flags and their values left out)."""
    found, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in FLAGS_WITH_VALUE
        else:
            found.append(arg)
    return found


def is_group(key: str) -> bool:
    """Whether an override's key chooses a config group's option (``model=...``, ``evaluator/decoding=...``)."""
    return "/" in key or (CONF_DIR / key).is_dir() or key.startswith("hydra")


def missing_key_message(cfg: DictConfig, key: str, value: str) -> str | None:
    """Why ``key`` cannot be set in ``cfg`` (None when it can): the closest existing key and the valid ones."""
    parts = key.split(".")
    node: object = cfg
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None  # a list index or a value below: Hydra and validation say what is wrong
        keys = [str(k) for k in node.keys()]
        if part not in keys:
            parent = ".".join(parts[:depth])
            close = difflib.get_close_matches(part, keys, n=1, cutoff=0.6)
            meant = ".".join([*parts[:depth], *close[:1], *parts[depth + 1 :]])
            hint = f"Did you mean {meant}={value}? " if close else ""
            scope = f"keys of {parent}" if parent else "keys at the top of the run config"
            return f"{key}={value}: no such key. {hint}Valid {scope}: {', '.join(sorted(keys))}"
        node = node._get_node(part)  # the node itself: a `???` value is a key that exists
        node = node if isinstance(node, DictConfig) else None
    return None


def unknown_key_problems(args: Sequence[str]) -> list[str]:
    """A message for each plain ``key=value`` override whose key the composed config does not have."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(override_arguments(args))
    except HydraException:
        return []  # a malformed override: Hydra's own message says where
    plain = [o for o in parsed if o.type == OverrideType.CHANGE and not is_group(o.key_or_group)]
    if not plain:
        return []
    others = [o.input_line for o in parsed if o not in plain]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=others)
    except HydraException:
        return []  # a group option that does not exist: Hydra lists the options
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, False)
    found = (missing_key_message(cfg, o.key_or_group, o.input_line.partition("=")[2]) for o in plain)
    return [message for message in found if message]
