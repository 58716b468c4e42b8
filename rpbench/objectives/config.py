"""Typed, frozen objective settings built from the ``objective`` config group.

Every value comes from the YAML (conf/objective/optim/default.yaml and the objective's own file): the
dataclasses hold no defaults, so each default lives in one place. ``from_mapping`` rejects unknown and
missing keys naming the valid ones; ``__post_init__`` checks the values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from transformers import SchedulerType

C = TypeVar("C", bound="ObjectiveConfig")
SCHEDULERS = tuple(kind.value for kind in SchedulerType)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class ObjectiveConfig:
    """The optimisation and loop settings every objective shares (conf/objective/optim/default.yaml)."""

    name: str
    lr: float
    scheduler: str
    warmup_ratio: float
    weight_decay: float
    adam_betas: tuple[float, float]
    adam_eps: float
    epochs: int
    batch_size: int
    grad_accum: int
    max_grad_norm: float | None
    packing: bool
    max_tokens_per_batch: int
    val_every_n_steps: int | None
    log_every_n_steps: int
    num_workers: int
    data_split: str | None

    @classmethod
    def from_mapping(cls: type[C], cfg: Mapping[str, Any]) -> C:
        """The typed config of ``cfg`` (``objective`` group, resolved); unknown or missing keys are errors."""
        values = dict(cfg)
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"objective ({values.get('name')}): unknown keys {unknown}; valid keys: {sorted(known)}")
        missing = sorted(set(known) - set(values))
        if missing:
            raise ValueError(f"objective ({values.get('name')}): missing keys {missing}")
        values["adam_betas"] = tuple(values["adam_betas"])
        return cls(**values)

    def problems(self) -> list[str]:
        """What is wrong with the values (subclasses add theirs)."""
        found = []
        for key in ("epochs", "batch_size", "grad_accum", "log_every_n_steps", "max_tokens_per_batch"):
            if int(getattr(self, key)) < 1:
                found.append(f"{key} must be an integer >= 1, got {getattr(self, key)}")
        for key in ("val_every_n_steps",):
            if getattr(self, key) is not None and int(getattr(self, key)) < 1:
                found.append(f"{key} must be null or an integer >= 1, got {getattr(self, key)}")
        if not float(self.lr) > 0:
            found.append(f"lr must be > 0, got {self.lr}")
        if not 0 <= float(self.warmup_ratio) <= 1:
            found.append(f"warmup_ratio must be a share of the steps in [0, 1], got {self.warmup_ratio}")
        if int(self.num_workers) < 0:
            found.append(f"num_workers must be >= 0, got {self.num_workers}")
        if len(self.adam_betas) != 2 or not all(_finite(b) and 0 <= b < 1 for b in self.adam_betas):
            found.append(f"adam_betas must be two numbers in [0, 1), got {list(self.adam_betas)}")
        if not (_finite(self.adam_eps) and self.adam_eps > 0):
            found.append(f"adam_eps must be a number > 0, got {self.adam_eps}")
        if not (_finite(self.weight_decay) and self.weight_decay >= 0):
            found.append(
                f"weight_decay must be a number >= 0 (a negative one grows the weights), got {self.weight_decay}"
            )
        if self.max_grad_norm is not None and not (_finite(self.max_grad_norm) and self.max_grad_norm > 0):
            found.append(f"max_grad_norm must be null (no clipping) or a number > 0, got {self.max_grad_norm}")
        if self.scheduler not in SCHEDULERS:
            found.append(
                f"scheduler must be a transformers scheduler name ({', '.join(SCHEDULERS)}), got {self.scheduler!r}"
            )
        return found

    def __post_init__(self) -> None:
        found = self.problems()
        if found:
            raise ValueError(f"objective ({self.name}): " + "; ".join(found))
