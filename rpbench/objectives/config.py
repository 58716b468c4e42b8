"""Typed, frozen objective settings built from the ``objective`` config group.

Every value comes from the YAML (conf/objective/optim/default.yaml and the objective's own file): the
dataclasses hold no defaults, so each default lives in one place. They are ``Settings``:
``config_class.parse(values, "objective")`` converts the types, reports unknown and missing keys and then
``problems()`` (each subclass adds its own), every problem naming ``objective.<key>``, its value and what is
allowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from transformers import SchedulerType

from rpbench.core.typed import Problem, Settings
from rpbench.scoring.judge.parties import Overlap

SCHEDULERS = tuple(kind.value for kind in SchedulerType)


def once_per_key(found: Iterable[Problem], more: Iterable[Problem]) -> list[Problem]:
    """``found``, then the (key, expected) pairs of ``more`` about a key not named yet: a key two rules check
    (an objective's own and a shared one, or rollout options built from the same key) is reported once, by the
    first. Messages are all kept."""
    kept = list(found)
    named = {problem[0] for problem in kept if isinstance(problem, tuple)}
    for problem in more:
        if isinstance(problem, tuple) and problem[0] in named:
            continue
        kept.append(problem)
        named |= {problem[0]} if isinstance(problem, tuple) else set()
    return kept


@dataclass(frozen=True, kw_only=True)
class ObjectiveSettings(Settings):
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

    def problems(self) -> list[Problem]:
        """What is wrong with the values (subclasses add theirs)."""
        found: list[Problem] = []
        for key in ("epochs", "batch_size", "grad_accum", "log_every_n_steps", "max_tokens_per_batch"):
            if getattr(self, key) < 1:
                found.append((key, "an integer >= 1"))
        if self.val_every_n_steps is not None and self.val_every_n_steps < 1:
            found.append(("val_every_n_steps", "null (once per epoch) or an integer >= 1"))
        if not self.lr > 0:
            found.append(("lr", "a number > 0"))
        if not 0 <= self.warmup_ratio <= 1:
            found.append(("warmup_ratio", "a share of the steps, 0 <= r <= 1"))
        if self.num_workers < 0:
            found.append(("num_workers", "an integer >= 0"))
        if not all(0 <= b < 1 for b in self.adam_betas):
            found.append(("adam_betas", "two numbers in [0, 1)"))
        if not self.adam_eps > 0:
            found.append(("adam_eps", "a number > 0"))
        if self.weight_decay < 0:
            found.append(("weight_decay", "a number >= 0 (a negative one grows the weights)"))
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            found.append(("max_grad_norm", "null (no clipping) or a number > 0"))
        if self.scheduler not in SCHEDULERS:
            found.append(("scheduler", f"a transformers scheduler name ({', '.join(SCHEDULERS)})"))
        return found

    def deepspeed_problems(self, zero3: bool) -> list[str]:
        """What these settings cannot do under a DeepSpeed engine (``zero3``: parameters partitioned), each a
        message starting with its key; checked at startup (validate) and at fit start. None by default."""
        return []

    def overlaps(self) -> list[Overlap]:
        """The parts of training one model plays twice (``rpbench.scoring.judge.parties``), found at startup:
        refused unless allowed, named in the results when allowed. None by default."""
        return []
