"""Qwen2 / Qwen2.5: text causal LMs with the ChatML template."""

from __future__ import annotations

from transformers import Qwen2Config, Qwen2ForCausalLM

from rpbench.models.families.base import FAMILIES, ModelFamily
from rpbench.models.tokenizer import TokenizerFamily


@FAMILIES.register("qwen2")
class Qwen2(ModelFamily):
    model_types = ("qwen2",)
    tiny_architecture = (Qwen2Config, Qwen2ForCausalLM)
    tiny_tokenizer = TokenizerFamily(
        special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        chat_template="qwen2.5",
        add_bos=False,
    )
