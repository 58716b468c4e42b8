"""Qwen3 (dense): text causal LMs with the ChatML template and ``<think>`` reasoning blocks.

Qwen3's own template is not prefix-stable (it renders the last assistant turn with a think block and
earlier ones without), so rpbench ships two training-safe variants (resources/chat_templates/README.md):
``qwen3`` (non-thinking, the default) and ``qwen3-thinking`` (reasoning trained in the target).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import Qwen3Config, Qwen3ForCausalLM

from rpbench.models.families.base import FAMILIES, ModelFamily
from rpbench.models.tiny import TINY_DEFAULTS
from rpbench.models.tokenizer import TokenizerFamily


@FAMILIES.register("qwen3")
class Qwen3(ModelFamily):
    model_types = ("qwen3",)
    tiny_architecture = (Qwen3Config, Qwen3ForCausalLM)
    tiny_tokenizer = TokenizerFamily(
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template="qwen3",
        add_bos=False,
        added_tokens=("<think>", "</think>"),  # as in Qwen3's vocabulary: single tokens, not special ones
    )

    @classmethod
    def build_tiny_model(cls, tokenizer, overrides: Mapping[str, Any], seed: int, attn_implementation: str):
        """Qwen3 sets ``head_dim`` apart from the width (128 by default): the tiny one keeps width / heads."""
        sizes = {**TINY_DEFAULTS, **dict(overrides or {})}
        head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
        return super().build_tiny_model(tokenizer, {"head_dim": head_dim, **sizes}, seed, attn_implementation)
