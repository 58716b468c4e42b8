"""Stage 3, training: the Lightning ``Trainer.fit`` of the configured objective, and what surrounds it.

``settings`` holds the stage's one input, ``TrainingSettings`` (parsed once by ``validate``); ``fit`` builds the
trainer and data and runs it; ``options`` checks the ``trainer`` group; ``resume`` lets a checkpoint resume
only into the training it was written for; ``starting_point`` warns when an objective starts from the wrong
kind of model and refuses records it does not train on; ``interrupt`` stops training on Ctrl-C at a step's
end, checkpointed; ``deepspeed_strategy``, ``cluster``, ``nonfinite`` and ``progress`` are the strategy,
plugins and callbacks the trainer gets.
"""

from rpbench.training.fit import build_datamodule, build_trainer, resolve_ckpt, train, zero_stage
from rpbench.training.resume import check_resume
from rpbench.training.settings import TrainingSettings, training_settings
from rpbench.training.starting_point import check_trained_records, untuned_start_warning

__all__ = [
    "build_datamodule",
    "build_trainer",
    "check_resume",
    "check_trained_records",
    "resolve_ckpt",
    "train",
    "training_settings",
    "TrainingSettings",
    "untuned_start_warning",
    "zero_stage",
]
