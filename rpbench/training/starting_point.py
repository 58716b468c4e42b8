"""Whether a run's objective starts from the kind of model it is meant for.

DPO and GRPO (``needs_tuned_start``) refine an instruction-tuned or SFT model; from a base model or
random weights they still train, without complaint, and that is rarely what was meant. The rule: such
an objective warns unless ``init_from`` names an earlier run or the model config says ``instruct: true``.
"""

from __future__ import annotations

from rpbench.objectives.registry import objective_class
from rpbench.training.spec import TrainingSpec


def untuned_start_warning(training: TrainingSpec) -> str | None:
    """The warning for ``training``, or None when its starting point suits its objective."""
    objective = training.objective.name
    if not objective_class(objective).needs_tuned_start:
        return None
    model = training.model
    if training.run.init_from or model["instruct"]:
        return None
    kind = (
        "random weights" if str(model["name_or_path"]).startswith("tiny:") else "a base (not instruction-tuned) model"
    )
    return (
        f"objective={objective} starts from model={model['name']}, {kind}: {objective} refines an "
        "instruction-tuned or SFT model; pass init_from=<SFT run folder>, or set model.instruct=true "
        "if this model is one"
    )
