"""Registered model families (``model.family``): each module registers one."""

from rpbench.core.registry import import_modules
from rpbench.models.families.base import FAMILIES, ModelFamily, family_named, family_of_model, family_or_base

import_modules(__name__, __path__)

__all__ = ["FAMILIES", "ModelFamily", "family_named", "family_of_model", "family_or_base"]
