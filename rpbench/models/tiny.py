"""Random-initialised tiny models from a family's config and model classes, for offline runs and tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import PreTrainedModel
from transformers.initialization import no_init_weights
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

TINY_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}


def initialised(model_cls: type, config, seed: int) -> PreTrainedModel:
    """``model_cls(config)`` with the weights its ``_init_weights`` draws from ``seed``, module by module.

    Under ZeRO-3 (rpbench.models.zero3) transformers creates the model partitioned and rank 0 initialises
    each module in the same order from the same random state: the same weights as built whole here."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if is_deepspeed_zero3_enabled():
            return model_cls._from_config(config)
        with no_init_weights():  # as under ZeRO-3: construction draws no random numbers
            model = model_cls(config)
        model.init_weights()
    return model


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
    model = initialised(model_cls, config, seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
