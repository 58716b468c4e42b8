"""What a model family says about its models, and the registry of families (``model.family``).

A family is a registered class: how to load a model and its tokenizer (or processor), how to render a
conversation as chat messages (``messages``: what its template needs, e.g. a system turn folded into the
first user turn), which image inputs its model takes, what its output layer does to the logits
(``logit_transform``), which modules LoRA adapts by default and the probe presets hook, and how to build its
tiny offline version. Generic code asks the family; it never tests a family's name. The base is a text-only
causal LM of the Llama/Qwen decoder shape with a plain linear output layer; an image-text-to-text family
(e.g. Qwen2-VL) overrides ``auto_model``, ``load_tokenizer`` (a processor), ``image_inputs`` and ``message``
(text with images).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rpbench.core.registry import Registry
from rpbench.data.records import Turn
from rpbench.models.tiny import build_tiny_model
from rpbench.models.tokenizer import TokenizerFamily, tiny_tokenizer

FAMILIES = Registry("model family")

# Probe preset -> (module-name pattern, captured side). Patterns match a suffix of the module name on
# dot boundaries and are searched inside the text decoder only.
DECODER_HOOK_PRESETS: dict[str, tuple[str, str]] = {
    "attn_out": (r"layers\.\d+\.self_attn\.o_proj", "output"),  # attention output after o_proj
    "mlp_act": (r"layers\.\d+\.mlp\.down_proj", "input"),  # act(gate) * up, the MLP neurons
    "mlp_out": (r"layers\.\d+\.mlp", "output"),  # MLP block output
    "residual": (r"layers\.\d+", "output"),  # residual stream after each decoder layer
}
# Config keys with which a transformers model changes its output layer's logits (a plain linear head has none).
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale")


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
    image_inputs: tuple[str, ...] = ()  # batch keys its model takes with images (its tokenizer's model_image_inputs)
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")  # model.lora without target_modules
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

    @classmethod
    def messages(cls, turns: Sequence[Turn]) -> list[dict[str, Any]]:
        """The chat-template messages of a conversation: one per turn."""
        return [cls.message(turn) for turn in turns]

    @classmethod
    def logit_transform(cls, config) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """What the model does to its output layer's logits (None: nothing), for code that computes them
        itself (rpbench.models.forward). A plain linear head: a config that transforms them is refused."""
        for name in LOGIT_TRANSFORMS:
            if getattr(config, name, None) not in (None, 1.0):
                raise ValueError(
                    f"model family {cls.__name__} has a plain linear output layer, but the model's config applies "
                    f"{name}={getattr(config, name)} to its logits"
                )
        return None


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


def family_or_base(model) -> type[ModelFamily]:
    """The registered family covering a loaded model, or the base family (a text-only causal LM of the
    Llama/Qwen decoder shape with a plain linear output layer) when none covers it."""
    try:
        return family_of_model(model)
    except ValueError:
        return ModelFamily
