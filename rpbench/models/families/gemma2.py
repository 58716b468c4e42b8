"""Gemma-2: text causal LMs with Gemma's turn template, softcapped logits and softcapped attention.

- **No system turn.** Gemma-2's template refuses a ``system`` message (and any order other than user,
  model, user, ...). This family folds a conversation's system turn into its first user turn, the system
  text, a blank line, then the user text (as Gemma 3's template does); a system turn followed by no user
  turn becomes a user turn of its own. Everything rendered for a Gemma-2 model (training rows, prompts)
  goes through this fold.
- **Final-logit softcapping** (``final_logit_softcapping``, 30): the model caps its logits as
  ``cap * tanh(logits / cap)``. rpbench computes log-probs from the output layer itself
  (rpbench.models.forward), so ``logit_transform`` gives it that cap; the fused cross-entropy (which would
  skip it) is never used for this family.
- **Attention softcapping** (``attn_logit_softcapping``, 50) is applied by the eager and flash-attention
  kernels only; ``sdpa`` would silently drop it, so it is refused: use ``eager`` (or ``flash_attention_2``).

The tiny version: Gemma2Config's architecture (alternating sliding-window and global layers, both caps)
at the tiny width, with an offline tokenizer holding Gemma's turn tokens and a template of the same format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

from rpbench.data.records import Turn
from rpbench.models.families.base import FAMILIES, ModelFamily
from rpbench.models.tiny import TINY_DEFAULTS
from rpbench.models.tokenizer import TokenizerFamily

SOFTCAPPING_ATTENTION = ("eager", "flash")  # the attention kernels (by name) that apply attn_logit_softcapping


@FAMILIES.register("gemma2")
class Gemma2(ModelFamily):
    model_types = ("gemma2",)
    tiny_architecture = (Gemma2Config, Gemma2ForCausalLM)
    tiny_tokenizer = TokenizerFamily(
        special_tokens=("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"),
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        chat_template="gemma2",  # resources/chat_templates/gemma2.jinja
        add_bos=True,
    )

    @classmethod
    def messages(cls, turns: Sequence[Turn]) -> list[dict[str, Any]]:
        """The conversation's messages, its system turn folded into the first user turn."""
        messages = super().messages(turns)
        if not messages or messages[0]["role"] != "system":
            return messages
        system, rest = messages[0]["content"], messages[1:]
        if rest and rest[0]["role"] == "user":
            return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}, *rest[1:]]
        return [{"role": "user", "content": system}, *rest]

    @classmethod
    def logit_transform(cls, config) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """``cap * tanh(logits / cap)``, as Gemma2ForCausalLM caps its logits (none when the cap is unset)."""
        cap = config.final_logit_softcapping
        if cap is None:
            return None
        return lambda logits: torch.tanh(logits / cap) * cap

    @staticmethod
    def check_attention(attn_implementation: str) -> None:
        if not any(kernel in attn_implementation for kernel in SOFTCAPPING_ATTENTION):
            raise ValueError(
                f"Gemma-2 softcaps its attention scores, which attn_implementation={attn_implementation!r} "
                "ignores: set model.attn_implementation=eager (or flash_attention_2)"
            )

    @classmethod
    def load_pretrained(cls, name: str, **kwargs: Any):
        cls.check_attention(str(kwargs["attn_implementation"]))
        return super().load_pretrained(name, **kwargs)

    @classmethod
    def build_tiny_model(cls, tokenizer, overrides: Mapping[str, Any], seed: int, attn_implementation: str):
        """Gemma2Config's head size (256) and query scale follow the tiny width instead: width / heads."""
        cls.check_attention(attn_implementation)
        sizes = {**TINY_DEFAULTS, **dict(overrides or {})}
        head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
        tiny = {"head_dim": head_dim, "query_pre_attn_scalar": head_dim, **sizes}
        return super().build_tiny_model(tokenizer, tiny, seed, attn_implementation)
