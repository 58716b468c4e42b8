"""Objective name (``objective.name``) -> LightningModule class."""

from __future__ import annotations

from importlib import import_module

OBJECTIVES = {
    "sft": "rpbench.objectives.sft:SFTModule",
    "dpo": "rpbench.objectives.dpo:DPOModule",
    "grpo": "rpbench.objectives.grpo:GRPOModule",
}


def objective_class(name: str):
    if name not in OBJECTIVES:
        raise ValueError(f"objective={name!r}: choose one of {sorted(OBJECTIVES)} (or none)")
    module, _, attr = OBJECTIVES[name].partition(":")
    return getattr(import_module(module), attr)
