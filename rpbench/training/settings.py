"""The training stage's one input: ``TrainingSettings``, parsed once from the composed config by ``validate``.

It holds what ``train``, the resume check, the start-point warning, the model building and the model card
read: the objective's typed config, the trainer options, the data settings (``DataSettings``), the model
config it starts from, the run's seed, checkpoint and export settings, and the fingerprint a resumed
checkpoint is compared with. No stage after ``validate`` reads the composed config for training.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rpbench.core.typed import Problem, Settings
from rpbench.data.settings import DataSettings
from rpbench.models.settings import ModelSettings
from rpbench.objectives.config import ObjectiveSettings
from rpbench.objectives.registry import objective_class
from rpbench.training.resume import RESUME_CHOICES, SHAPING_KEYS, shaping_settings
from rpbench.training.trainer_settings import TrainerSettings

MAX_SEED = 2**32 - 1  # numpy's seed range, which Lightning's seed_everything enforces


@dataclass(frozen=True, kw_only=True)
class RunSettings(Settings):
    """The keys at the top of the run config: its name, seed, start and checkpoints."""

    run_name: str  # titles the loss curve
    short_run: str | None  # why the run is short (debug=short, ...), recorded in metrics.json; None: a full run
    seed: int
    init_from: str | None
    ckpt_path: str | None
    resume: str
    checkpoint_every_n_steps: int | None
    save_model: bool

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if not 0 <= self.seed <= MAX_SEED:
            found.append(("seed", f"an integer from 0 to {MAX_SEED}"))
        if self.checkpoint_every_n_steps is not None and self.checkpoint_every_n_steps < 1:
            found.append(("checkpoint_every_n_steps", "null or an integer >= 1"))
        if self.resume not in RESUME_CHOICES:
            found.append(("resume", f"one of {', '.join(RESUME_CHOICES)}"))
        return found


@dataclass(frozen=True, kw_only=True)
class HubSettings(Settings):
    """Where ``export.push_to_hub`` uploads ``model/`` (the ``export.hub`` group)."""

    repo_id: str | None
    private: bool
    token_env: str
    endpoint: str | None


@dataclass(frozen=True, kw_only=True)
class ExportSettings(Settings):
    """The ``export`` group: the LoRA adapter beside the merged model (training's export of ``model/``) and
    the upload of ``model/`` at the end of the run (the pipeline's)."""

    lora_adapter: bool
    push_to_hub: bool
    hub: HubSettings


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


def training_settings(
    cfg: DictConfig,
    objective: ObjectiveSettings,
    data: DataSettings,
    model: ModelSettings,
    trainer: TrainerSettings,
    run: RunSettings,
    export: ExportSettings,
) -> TrainingSettings:
    """The training stage's settings of ``cfg`` for its (already parsed) ``objective``, ``data``, run ``model``
    config, ``trainer`` options, ``run`` and ``export`` settings; the fingerprint from ``cfg``'s shaping keys."""
    return TrainingSettings(
        objective=objective,
        split=objective.data_split or objective_class(objective.name).data_split,
        data=data,
        model=model,
        trainer=trainer,
        run=run,
        export=export,
        fingerprint=types.MappingProxyType(shaping_settings({key: _plain(cfg[key]) for key in SHAPING_KEYS})),
    )
