"""The training stage's one input: ``TrainingSettings``, parsed once from the composed config by ``validate``.

It holds what ``train``, the resume check, the start-point warning, the model building and the model card
read: the objective's typed config, the trainer options, the data settings (``DataSettings``), the model
config it starts from, the run's seed, checkpoint and export settings, and the fingerprint a resumed
checkpoint is compared with. No stage after ``validate`` reads the composed config for training.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.data.settings import DataSettings
from rpbench.models.settings import ModelSettings
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.registry import objective_class
from rpbench.training.resume import SHAPING_KEYS, shaping_settings
from rpbench.training.trainer_settings import TrainerSettings

S = TypeVar("S", bound=Settings)


@dataclass(frozen=True, kw_only=True)
class RunSettings(Settings):
    """The keys at the top of the run config that training reads."""

    run_name: str  # titles the loss curve
    seed: int
    init_from: str | None
    ckpt_path: str | None
    resume: str
    checkpoint_every_n_steps: int | None
    save_model: bool


@dataclass(frozen=True, kw_only=True)
class ExportSettings(Settings):
    """What training's export of ``model/`` reads of the ``export`` group (the upload is the pipeline's)."""

    lora_adapter: bool


@dataclass(frozen=True, kw_only=True)
class TrainingSettings:
    """Everything the training stage reads, typed and frozen."""

    objective: ObjectiveSettings
    split: str  # the data file trained on: objective.data_split, or the objective's own
    data: DataSettings  # the run's data settings (name and files for the model card, rendering)
    model: ModelSettings  # the run's model, name_or_path pointed at init_from's saved model
    trainer: TrainerSettings
    run: RunSettings
    export: ExportSettings
    fingerprint: Mapping[str, Any]  # the settings that shape training, compared before a checkpoint resumes

    def with_records(self, digests: Mapping[str, str]) -> TrainingSettings:
        """This spec with the content digests of the records trained on (data file -> ``records_sha256``) in
        its fingerprint: a file replaced at the same path does not resume the checkpoint of the old one."""
        found = {f"data.records_sha256.{file}": digest for file, digest in digests.items()}
        return replace(self, fingerprint=types.MappingProxyType({**self.fingerprint, **found}))


def _plain(value: Any) -> Any:
    """A config node's value resolved to plain data."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _picked(cls: type[S], node: DictConfig, where: str, problems: list[str]) -> S | None:
    """``cls`` collected from the keys of ``node`` it declares (the others are other stages')."""
    return cls.collect({f.name: _plain(node[f.name]) for f in fields(cls) if f.name in node}, where, problems)


def training_settings(
    cfg: DictConfig, objective: ObjectiveSettings, data: DataSettings, model: ModelSettings, trainer: TrainerSettings
) -> TrainingSettings:
    """The training stage's settings of ``cfg`` for its (already parsed) ``objective``, ``data``, run ``model``
    config and ``trainer`` options; a ConfigError naming each key whose value cannot be read."""
    problems: list[str] = []
    run = _picked(RunSettings, cfg, "", problems)
    export = _picked(ExportSettings, cfg.export, "export", problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return TrainingSettings(
        objective=objective,
        split=str(objective.data_split or objective_class(objective.name).data_split),
        data=data,
        model=model,
        trainer=trainer,
        run=run,
        export=export,
        fingerprint=types.MappingProxyType(shaping_settings({key: _plain(cfg[key]) for key in SHAPING_KEYS})),
    )
