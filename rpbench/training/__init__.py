"""Stage 3, training: the Lightning ``Trainer.fit`` of the configured objective, and what surrounds it.

``fit`` builds the trainer and data and runs it; ``options`` checks the ``trainer`` group; ``resume`` lets a
checkpoint resume only into the training it was written for; ``starting_point`` warns when an objective
starts from the wrong kind of model; ``deepspeed_strategy``, ``cluster``, ``nonfinite`` and ``progress`` are
the strategy, plugins and callbacks the trainer gets.
"""

from rpbench.training.fit import build_datamodule, build_trainer, objective_config, resolve_ckpt, train, zero_stage
from rpbench.training.resume import check_resume
from rpbench.training.starting_point import untuned_start_warning

__all__ = [
    "build_datamodule",
    "build_trainer",
    "check_resume",
    "objective_config",
    "resolve_ckpt",
    "train",
    "untuned_start_warning",
    "zero_stage",
]
