"""Gemma-3 text models (``gemma3_text``, e.g. google/gemma-3-270m): Gemma-2's turn handling without its caps.

Like Gemma-2, Gemma-3's format has no system role, so this family folds a system turn into the first user
turn (the Gemma2 family's ``messages``). Gemma-3 normalises queries and keys instead of softcapping attention
scores, so every attention kernel applies it (sdpa included); a config that softcaps its logits gets the cap
applied by ``logit_transform`` as for Gemma-2. The 270M base model ships no chat template:
conf/model/gemma3-270m.yaml sets rpbench's ``plain`` one (rpbench/resources/chat_templates/README.md).
"""

from __future__ import annotations

from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from rpbench.models.families.base import FAMILIES
from rpbench.models.families.gemma2 import Gemma2
from rpbench.models.tokenizer import TokenizerFamily


@FAMILIES.register("gemma3")
class Gemma3(Gemma2):
    model_types = ("gemma3_text",)
    tiny_architecture = (Gemma3TextConfig, Gemma3ForCausalLM)
    tiny_tokenizer = TokenizerFamily(
        special_tokens=("<pad>", "<eos>", "<bos>"),
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        chat_template="plain",
        add_bos=True,
    )

    @staticmethod
    def check_attention(attn_implementation: str) -> None:
        """Any kernel: Gemma-3 softcaps no attention scores."""
