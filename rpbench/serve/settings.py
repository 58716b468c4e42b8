"""The server's settings (the ``serve`` group: conf/serve/default.yaml) and ``task=serve``'s typed run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from rpbench.core.paths import CONF_DIR
from rpbench.core.typed import Problem, Settings
from rpbench.models.settings import ModelSettings

SETTINGS_FILE = CONF_DIR / "serve" / "default.yaml"


@dataclass(frozen=True, kw_only=True)
class ServeSettings(Settings):
    """The ``serve`` group; every value, and what it does, is in conf/serve/default.yaml."""

    host: str
    port: int
    max_batch_size: int
    batch_wait_ms: float
    max_tokens: int
    max_queue: int
    name: str | None

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if not self.host.strip():
            found.append(("host", "an address to listen on (127.0.0.1: this machine only)"))
        if not 0 <= self.port <= 65535:
            found.append(("port", "a port from 0 (a free one) to 65535"))
        for key in ("max_batch_size", "max_tokens", "max_queue"):
            if getattr(self, key) < 1:
                found.append((key, "an integer >= 1"))
        if self.batch_wait_ms < 0:
            found.append(("batch_wait_ms", "a number of milliseconds >= 0"))
        return found


@dataclass(frozen=True)
class ServeRun:
    """``task=serve`` (``python run.py task=serve``, ``python -m rpbench.serve``), parsed by ``rpbench.validate``:
    the model served (``init_from``'s saved model when set) and the server's settings."""

    model: ModelSettings
    serve: ServeSettings


def serve_settings(values: Mapping[str, Any], where: str) -> ServeSettings:
    """The settings of a server started from code (tests, ``judge=local``): conf/serve/default.yaml's values
    with ``values`` over them, checked (a ConfigError names ``where``.<key>)."""
    return ServeSettings.parse({**OmegaConf.to_container(OmegaConf.load(SETTINGS_FILE)), **values}, where)
