"""Whether a run's objective starts from the kind of model, and reads the kind of records, it is meant for.

Records: each objective declares the record types its ``render`` takes (``record_types``); records of
another type (conversation scenarios given to SFT) are refused by name once read, before a model loads.

Model: DPO and GRPO (``needs_tuned_start``) refine an instruction-tuned or SFT model; from a base model or
random weights they still train, without complaint, and that is rarely what was meant. The rule: such
an objective warns unless ``init_from`` names an earlier run or the model config says ``instruct: true``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rpbench.core.errors import ConfigError
from rpbench.objectives.registry import objective_class
from rpbench.training.settings import TrainingSettings


def check_trained_records(training: TrainingSettings, examples: Sequence) -> None:
    """A ConfigError when the records read for training are not of a type the objective renders (scenarios
    given to SFT, conversations to DPO), before any model is loaded."""
    module_cls = objective_class(training.objective.name)
    wanted = module_cls.record_types
    wrong = next((example for example in examples if wanted and not isinstance(example, wanted)), None)
    if wrong is None:
        return
    kinds = " or ".join(kind.__name__ for kind in wanted)
    raise ConfigError(
        f"objective={training.objective.name} trains on {kinds} records; data.files.{training.split} of "
        f"data={training.data.name} (format {training.data.format}) holds {type(wrong).__name__} records "
        f"(record {wrong.id!r}): choose data that holds them, or an objective that trains on this data"
    )


def untuned_start_warning(training: TrainingSettings) -> str | None:
    """The warning for ``training``, or None when its starting point suits its objective."""
    objective = training.objective.name
    if not objective_class(objective).needs_tuned_start:
        return None
    model = training.model
    if training.run.init_from or model.instruct:
        return None
    kind = "random weights" if model.is_tiny else "a base (not instruction-tuned) model"
    return (
        f"objective={objective} starts from model={model.name}, {kind}: {objective} refines an "
        "instruction-tuned or SFT model; pass init_from=<SFT run folder>, or set model.instruct=true "
        "if this model is one"
    )
