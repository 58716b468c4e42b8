"""Llama 3 / 3.1: text causal LMs with the Llama-3 header template."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM

from rpbench.models.families.base import FAMILIES, ModelFamily
from rpbench.models.tokenizer import TokenizerFamily


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
    )
