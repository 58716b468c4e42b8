"""What a model family says about its models, and the registry of families (``model.family``).

A family is a registered class: how to load a model and its tokenizer (or processor), how to render a
turn as a chat message, which modules the probe presets hook, and how to build its tiny offline
version. The base is a text-only causal LM of the Llama/Qwen decoder shape; an image-text-to-text family
(e.g. Qwen2-VL) overrides ``auto_model``, ``load_tokenizer`` (a processor) and ``message`` (text with images).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rpbench.data.records import Turn
from rpbench.models.tiny import build_tiny_model
from rpbench.models.tokenizer import TokenizerFamily, tiny_tokenizer
from rpbench.registry import Registry

FAMILIES = Registry("model family")

# Probe preset -> (module-name pattern, captured side). Patterns match a suffix of the module name on
# dot boundaries and are searched inside the text decoder only.
DECODER_HOOK_PRESETS: dict[str, tuple[str, str]] = {
    "attn_out": (r"layers\.\d+\.self_attn\.o_proj", "output"),  # attention output after o_proj
    "mlp_act": (r"layers\.\d+\.mlp\.down_proj", "input"),  # act(gate) * up, the MLP neurons
    "mlp_out": (r"layers\.\d+\.mlp", "output"),  # MLP block output
    "residual": (r"layers\.\d+", "output"),  # residual stream after each decoder layer
}


class ModelFamily:
    """A text-only causal LM (``AutoModelForCausalLM`` + ``AutoTokenizer``) with Llama/Qwen module names.

    Subclasses set ``model_types`` (the HF ``config.model_type`` values they cover: probes find a loaded
    model's family by it), ``tiny_architecture`` (config and model class of the tiny version) and
    ``tiny_tokenizer`` (its offline tokenizer's special tokens and chat template).
    """

    model_types: tuple[str, ...] = ()
    auto_model = AutoModelForCausalLM
    lora_task_type = "CAUSAL_LM"
    takes_images = False  # True: the model sees Turn.image (its tokenizer is an ImageTextTokenizer)
    vision_module: str | None = None  # the vision tower's module name (model.freeze_vision freezes it)
    hook_presets: Mapping[str, tuple[str, str]] = DECODER_HOOK_PRESETS
    tiny_architecture: tuple[type, type]
    tiny_tokenizer: TokenizerFamily

    @classmethod
    def load_tokenizer(cls, name: str, revision: str | None, trust_remote_code: bool):
        """The hub / local tokenizer (a processor for families that take images)."""
        return AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code)

    @classmethod
    def load_pretrained(cls, name: str, **kwargs: Any) -> PreTrainedModel:
        return cls.auto_model.from_pretrained(name, **kwargs)

    @classmethod
    def build_tiny_tokenizer(cls, vocab_size: int):
        return tiny_tokenizer(cls.tiny_tokenizer, vocab_size)

    @classmethod
    def build_tiny_model(cls, tokenizer, overrides: Mapping[str, Any], seed: int, attn_implementation: str):
        config_cls, model_cls = cls.tiny_architecture
        return build_tiny_model(config_cls, model_cls, tokenizer, overrides, seed, attn_implementation)

    @staticmethod
    def message(turn: Turn) -> dict[str, Any]:
        """The chat-template message of a turn: its text (a text-only model does not see images)."""
        return turn.as_message()


def family_named(name: str) -> type[ModelFamily]:
    """The registered family ``model.family`` names."""
    return FAMILIES.get(name)


def family_of_model(model) -> type[ModelFamily]:
    """The registered family covering a loaded model's ``config.model_type`` (PEFT wrappers included)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for name in FAMILIES.names():
        if model_type in FAMILIES.get(name).model_types:
            return FAMILIES.get(name)
    covered = {name: FAMILIES.get(name).model_types for name in FAMILIES.names()}
    raise ValueError(f"no registered model family covers model_type={model_type!r} (families: {covered})")
