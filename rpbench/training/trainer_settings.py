"""The ``trainer`` config group: Lightning Trainer options, passed through as they are.

Every key of ``cfg.trainer`` must be a parameter of ``lightning.Trainer.__init__`` (an unknown key is an
error, never ignored). rpbench reads two of them its own way: ``strategy`` may also be
``{name: deepspeed, config: {...}}`` (rpbench.training.fit), and ``callbacks`` is a list of ``_target_``
specs, instantiated and added to rpbench's own callbacks. The Trainer parameters in ``SET_ELSEWHERE`` are
derived from another part of the run config and are refused here with a pointer to it.
"""

from __future__ import annotations

import copy
import inspect
import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L

if TYPE_CHECKING:
    from rpbench.objectives.config import ObjectiveSettings

# Trainer parameters rpbench sets itself: where they are configured instead.
SET_ELSEWHERE = {
    "max_epochs": "set objective.epochs",
    "accumulate_grad_batches": "set objective.grad_accum",
    "gradient_clip_val": "set objective.max_grad_norm",
    "log_every_n_steps": "set objective.log_every_n_steps",
    "logger": "choose logger=csv|wandb|tensorboard|mlflow|none",
    "default_root_dir": "set paths.output_dir (or hydra.run.dir)",
    "num_sanity_val_steps": "rpbench runs the full sanity pass: it measures held_out.before",
    "use_distributed_sampler": "rpbench's datamodule plans each rank's batches itself",
    "plugins": "cluster plugins are chosen from the environment (rpbench.training.cluster)",
}


@dataclass(frozen=True)
class TrainerSettings:
    """The ``trainer`` group as checked by ``trainer_problems``: free-form ``lightning.Trainer`` keyword
    arguments (no fixed dataclass lists them), held read-only."""

    values: Mapping[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", types.MappingProxyType(copy.deepcopy(dict(self.values))))

    def as_dict(self) -> dict[str, Any]:
        """A plain copy of the options, for code that reads or passes them on."""
        return copy.deepcopy(dict(self.values))


def trainer_parameters() -> list[str]:
    """The names ``lightning.Trainer.__init__`` accepts."""
    return [name for name in inspect.signature(L.Trainer.__init__).parameters if name != "self"]


def trainer_problems(trainer_cfg: Mapping[str, Any], objective_cfg: Mapping[str, Any]) -> list[str]:
    """What is wrong with the ``trainer`` group's keys (and ``objective.max_steps``, which moved there)."""
    valid = trainer_parameters()
    problems = []
    for key in trainer_cfg:
        if key in SET_ELSEWHERE:
            problems.append(f"trainer.{key}: not set in the trainer group: {SET_ELSEWHERE[key]}")
        elif key not in valid:
            allowed = ", ".join(sorted(set(valid) - set(SET_ELSEWHERE)))
            problems.append(f"trainer.{key}: not an option of lightning.Trainer; valid keys: {allowed}")
    if "max_steps" in objective_cfg:
        problems.append("objective.max_steps: the run length is set by trainer.max_steps (e.g. trainer.max_steps=3)")
    if trainer_cfg.get("val_check_interval") is not None and objective_cfg.get("val_every_n_steps") is not None:
        problems.append(
            "trainer.val_check_interval and objective.val_every_n_steps are both set: set only one "
            "(val_every_n_steps counts optimizer steps, val_check_interval micro-batches or a fraction of an epoch)"
        )
    problems += value_problems(trainer_cfg)
    callbacks = trainer_cfg.get("callbacks") or []
    if (
        isinstance(callbacks, str)
        or not isinstance(callbacks, Sequence)
        or not all(isinstance(c, Mapping) and "_target_" in c for c in callbacks)
    ):
        problems.append(f"trainer.callbacks={callbacks!r}: expected a list of {{_target_: module.Class, ...}} specs")
    return problems


PRECISIONS = (
    "16-true",
    "16-mixed",
    "bf16-true",
    "bf16-mixed",
    "32-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    "16",
    "32",
    "64",
    "bf16",
)
ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps", "tpu")


def _count(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _batches(value: Any) -> bool:
    """A number of batches >= 1 or a share of an epoch in (0, 1]."""
    if isinstance(value, bool):
        return False
    return _count(value, 1) or (isinstance(value, float) and 0 < value <= 1)


def value_problems(trainer_cfg: Mapping[str, Any]) -> list[str]:
    """Values Lightning would reject late, or accept and train nothing with (``max_steps=0``,
    ``limit_train_batches=0``)."""
    found = []
    checks = {
        "max_steps": (lambda v: v == -1 or _count(v, 1), "-1 (objective.epochs decide) or an integer >= 1"),
        "limit_train_batches": (
            lambda v: v is None or _batches(v),
            "null, a number of batches >= 1 or a share in (0, 1]",
        ),
        "limit_val_batches": (
            lambda v: v is None or v == 0 or _batches(v),
            "null, 0 (no validation), a count or a share",
        ),
        "val_check_interval": (
            lambda v: v is None or _batches(v),
            "null, micro-batches >= 1 or a share of an epoch in (0, 1]",
        ),
        "precision": (lambda v: str(v) in PRECISIONS, f"one of {', '.join(PRECISIONS[:6])}"),
        "accelerator": (lambda v: str(v) in ACCELERATORS, f"one of {', '.join(ACCELERATORS)}"),
        "num_nodes": (lambda v: _count(v, 1), "an integer >= 1"),
        "devices": (_devices, "auto, -1 (all), a count >= 1, or a list of device indices"),
    }
    for key, (ok, expected) in checks.items():
        if key in trainer_cfg and not ok(trainer_cfg[key]):
            found.append(f"trainer.{key}={trainer_cfg[key]!r}: expected {expected}")
    if str(trainer_cfg.get("accelerator")) in ("gpu", "cuda") and not _cuda_available():
        found.append(
            f"trainer.accelerator={trainer_cfg['accelerator']}: no CUDA device here "
            "(use trainer.accelerator=cpu or auto)"
        )
    return found


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _devices(value: Any) -> bool:
    if value == "auto" or value == -1 or _count(value, 1):
        return True
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        return (
            bool(parts) and all(p.isdigit() for p in parts) and (len(parts) > 1 or int(parts[0]) >= 1 or "," in value)
        )
    return isinstance(value, (list, tuple)) and bool(value) and all(_count(v, 0) for v in value)


def passed_options(trainer_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer group's options for ``lightning.Trainer``, less ``strategy`` and ``callbacks``
    (built by the caller and by ``extra_callbacks``)."""
    return {k: v for k, v in trainer_cfg.items() if k not in ("strategy", "callbacks")}


def extra_callbacks(trainer_cfg: Mapping[str, Any]) -> list:
    """``trainer.callbacks``, instantiated from their ``_target_`` specs."""
    from hydra.utils import instantiate

    return [instantiate(spec) for spec in trainer_cfg.get("callbacks") or []]


def most_micro_batches(objective: ObjectiveSettings, train_records: int) -> int:
    """The most micro-batches an epoch of ``train_records`` records can give one rank: a record renders to one
    sample at most, a packed batch holds one at least, and a rank's batches fill whole optimizer steps."""
    batches = train_records if objective.packing else math.ceil(train_records / int(objective.batch_size))
    grad_accum = int(objective.grad_accum)
    return math.ceil(batches / grad_accum) * grad_accum


def epoch_problems(trainer_cfg: Mapping[str, Any], objective: ObjectiveSettings, train_records: int) -> list[str]:
    """What Lightning refuses once it counts an epoch's training batches, checked once the records are read
    (before the model loads) against ``most_micro_batches``: a ``limit_train_batches`` share that keeps no
    batch, a validation interval (``trainer.val_check_interval``, or ``objective.val_every_n_steps`` times
    ``grad_accum``) past the epoch's end."""
    if trainer_cfg.get("fast_dev_run"):
        return []  # Lightning's own 1-batch run replaces these limits
    most = most_micro_batches(objective, train_records)
    epoch = f"an epoch has at most {most} training micro-batches ({train_records} records"
    epoch += ", packed)" if objective.packing else f" in micro-batches of {objective.batch_size})"
    found = []
    limit = trainer_cfg.get("limit_train_batches")
    if isinstance(limit, float) and int(most * limit) == 0:
        found.append(
            f"trainer.limit_train_batches={limit!r}: keeps no training batch ({epoch}): set a share of at least "
            f"{math.ceil(1000 / most) / 1000}, a number of batches, or null"
        )
        return found
    if limit is None:
        batches = most
    else:
        batches = min(most, limit) if isinstance(limit, int) else int(most * limit)
    every_epoch = "check_val_every_n_epoch" not in trainer_cfg or trainer_cfg["check_val_every_n_epoch"] is not None
    validating = trainer_cfg.get("limit_val_batches") != 0 and every_epoch
    interval = trainer_cfg.get("val_check_interval")
    if objective.val_every_n_steps:
        interval = int(objective.val_every_n_steps) * int(objective.grad_accum)
        key = f"objective.val_every_n_steps={objective.val_every_n_steps} ({interval} micro-batches)"
    else:
        key = f"trainer.val_check_interval={interval!r}"
    if validating and isinstance(interval, int) and not isinstance(interval, bool) and interval > batches:
        limited = "" if batches == most else f"; {batches} with trainer.limit_train_batches={limit!r}"
        found.append(
            f"{key}: past the end of the epoch ({epoch}{limited}), which Lightning refuses: validate at most every "
            f"{batches} micro-batches, or give a share of the epoch (trainer.val_check_interval=0.5)"
        )
    return found
