"""Llama 3 / 3.1: text causal LMs with the Llama-3 header template."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM

from rpbench.models.families.base import FAMILIES, ModelFamily
from rpbench.models.tokenizer import TokenizerFamily

# Llama 3's pre-tokenization split (digits in runs of up to three).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@FAMILIES.register("llama")
class Llama(ModelFamily):
    model_types = ("llama",)
    tiny_architecture = (LlamaConfig, LlamaForCausalLM)
    tiny_tokenizer = TokenizerFamily(
        special_tokens=(
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|finetune_right_pad_id|>",
        ),
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad="<|finetune_right_pad_id|>",
        chat_template="llama3",
        add_bos=True,
        split_pattern=LLAMA3_SPLIT,
    )
