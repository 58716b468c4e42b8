"""Random-initialised tiny models from a family's config and model classes, for offline runs and tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import PreTrainedModel

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
    config_cls: type,
    model_cls: type,
    tokenizer,
    overrides: Mapping[str, Any],
    seed: int,
    attn_implementation: str,
) -> PreTrainedModel:
    """A randomly initialised ``model_cls`` sized by ``overrides`` over TINY_DEFAULTS."""
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
