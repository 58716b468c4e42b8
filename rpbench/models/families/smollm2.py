"""SmolLM2 (HuggingFaceTB): Llama's architecture with a ChatML chat template, its tokenizer's own."""

from __future__ import annotations

from rpbench.models.families.base import FAMILIES
from rpbench.models.families.llama import Llama


@FAMILIES.register("smollm2")
class SmolLM2(Llama):
    # config.model_type is llama, which the Llama family covers (the same modules): none claimed here
    model_types = ()
