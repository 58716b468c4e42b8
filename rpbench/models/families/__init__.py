"""Registered model families (``model.family``): each module registers one."""

from rpbench.models.families import llama, qwen2  # noqa: F401  (each registers its family)
from rpbench.models.families.base import FAMILIES, ModelFamily, family_named, family_of_model

__all__ = ["FAMILIES", "ModelFamily", "family_named", "family_of_model"]
