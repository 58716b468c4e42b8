"""Qwen2-VL / Qwen2.5-VL: image-text-to-text models (ChatML, images as <|vision_start|><|image_pad|>...).

The tokenizer is an ``ImageTextTokenizer`` over the model's processor (``Qwen2VLTokenizer``: an image's
patch grid ``image_grid_thw``, merged ``merge_size`` x ``merge_size`` into tokens); a turn with an image
renders as the image followed by its text. The tiny version: a 2-layer text model, a 2-block vision tower and an
offline processor whose images become a few dozen tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

from rpbench.data.records import Turn
from rpbench.models.families.base import FAMILIES, ModelFamily
from rpbench.models.tiny import TINY_DEFAULTS, initialised
from rpbench.models.tokenizer import TokenizerFamily, tiny_tokenizer
from rpbench.models.vision import MODALITY_INPUT, ImageTextTokenizer

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
IMAGE_SPAN_TOKENS = ("<|vision_start|>", "<|vision_end|>")  # around an image's <|image_pad|> tokens
# Tiny images: at most 112x112 pixels, i.e. 4 to 16 image tokens after the 2x2 merge of 14-pixel patches.
TINY_PIXELS = {"min_pixels": 56 * 56, "max_pixels": 112 * 112}
TINY_VISION = {"depth": 2, "embed_dim": 32, "num_heads": 2, "mlp_ratio": 2}


class Qwen2VLTokenizer(ImageTextTokenizer):
    """An image is pixel patches on a temporal x height x width grid (``image_grid_thw``), each
    ``merge_size`` x ``merge_size`` block of patches one image token."""

    pixel_input_names = ("pixel_values", "image_grid_thw")

    def image_token_counts(self, pixels: dict) -> list[int]:
        merged = int(self.processor.image_processor.merge_size) ** 2
        return [int(grid.prod()) // merged for grid in pixels["image_grid_thw"]]


@FAMILIES.register("qwen2_vl")
class Qwen2VL(ModelFamily):
    model_types = ("qwen2_vl", "qwen2_5_vl")
    auto_model = AutoModelForImageTextToText
    takes_images = True
    vision_module = "visual"  # the vision tower (and its merger) inside the model
    image_inputs = (*Qwen2VLTokenizer.pixel_input_names, MODALITY_INPUT)
    tiny_tokenizer = TokenizerFamily(
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>", *VISION_TOKENS),
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template="qwen2-vl",
        add_bos=False,
    )

    @classmethod
    def load_tokenizer(cls, name: str, revision: str | None, trust_remote_code: bool):
        return Qwen2VLTokenizer(
            AutoProcessor.from_pretrained(name, revision=revision, trust_remote_code=trust_remote_code),
            span_tokens=IMAGE_SPAN_TOKENS,
        )

    @classmethod
    def build_tiny_tokenizer(cls, vocab_size: int):
        tokenizer = tiny_tokenizer(cls.tiny_tokenizer, vocab_size)
        processor = Qwen2VLProcessor(
            image_processor=Qwen2VLImageProcessor(**TINY_PIXELS),
            tokenizer=tokenizer,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=tokenizer.chat_template,
        )
        return Qwen2VLTokenizer(processor, span_tokens=IMAGE_SPAN_TOKENS)

    @classmethod
    def build_tiny_model(cls, tokenizer, overrides: Mapping[str, Any], seed: int, attn_implementation: str):
        text = {**TINY_DEFAULTS, **{k: v for k, v in dict(overrides or {}).items() if k != "vision"}}
        head_dim = text["hidden_size"] // text["num_attention_heads"]
        ids = tokenizer.convert_tokens_to_ids
        config = Qwen2VLConfig(
            text_config={
                **text,
                "vocab_size": len(tokenizer),
                "bos_token_id": tokenizer.bos_token_id,
                "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id,
                # multimodal rope: temporal/height/width sections of the rotary half-dimension
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": _mrope(head_dim)},
            },
            vision_config={
                **TINY_VISION,
                **dict(dict(overrides or {}).get("vision", {})),
                "hidden_size": text["hidden_size"],
            },
            image_token_id=ids("<|image_pad|>"),
            video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"),
            vision_end_token_id=ids("<|vision_end|>"),
            tie_word_embeddings=bool(text["tie_word_embeddings"]),
        )
        config._attn_implementation = attn_implementation
        model = initialised(Qwen2VLForConditionalGeneration, config, seed)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        return model

    @staticmethod
    def message(turn: Turn) -> dict[str, Any]:
        """A turn with an image: the image, then its text; other turns: their text."""
        if turn.image is None:
            return turn.as_message()
        return {"role": turn.role, "content": [{"type": "image"}, {"type": "text", "text": turn.content}]}


def _mrope(head_dim: int) -> list[int]:
    half = head_dim // 2
    return [half - 2 * (half // 3), half // 3, half // 3]
