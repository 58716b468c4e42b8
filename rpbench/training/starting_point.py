"""Whether a run's objective starts from the kind of model it is meant for.

DPO and GRPO (``needs_tuned_start``) refine an instruction-tuned or SFT model; from a base model or
random weights they still train, without complaint, and that is rarely what was meant. The rule: such
an objective warns unless ``init_from`` names an earlier run or the model config says ``instruct: true``.
"""

from __future__ import annotations

from omegaconf import DictConfig

from rpbench.objectives.registry import objective_class


def untuned_start_warning(cfg: DictConfig) -> str | None:
    """The warning for ``cfg``, or None when its starting point suits its objective."""
    objective = str(cfg.objective.name)
    if objective == "none" or not objective_class(objective).needs_tuned_start:
        return None
    if cfg.get("init_from") or cfg.model.instruct:
        return None
    kind = (
        "random weights" if str(cfg.model.name_or_path).startswith("tiny:") else "a base (not instruction-tuned) model"
    )
    return (
        f"objective={objective} starts from model={cfg.model.name}, {kind}: {objective} refines an "
        "instruction-tuned or SFT model; pass init_from=<SFT run folder>, or set model.instruct=true "
        "if this model is one"
    )
