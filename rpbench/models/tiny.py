"""Random-initialised tiny models from the real families' config classes, for offline runs and tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

TINY_ARCHITECTURES = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
TINY_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}


def build_tiny_model(
    family: str, tokenizer, overrides: Mapping[str, Any] | None = None, seed: int = 0, attn_implementation: str = "sdpa"
) -> PreTrainedModel:
    """A randomly initialised ``family`` model sized by ``overrides`` over TINY_DEFAULTS."""
    if family not in TINY_ARCHITECTURES:
        raise ValueError(f"unknown tiny model family {family!r}; choose one of {sorted(TINY_ARCHITECTURES)}")
    config_cls, model_cls = TINY_ARCHITECTURES[family]
    config = config_cls(
        **{**TINY_DEFAULTS, **dict(overrides or {})},
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
