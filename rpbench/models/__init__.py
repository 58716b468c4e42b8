"""Model factory: ``load(settings) -> (model, tokenizer)`` for tiny offline models and real HF models."""

from rpbench.models.loading import (
    DeferredModel,
    chat_renderer,
    end_of_turn_ids,
    family_of,
    for_inference,
    load,
    load_model,
    load_tokenizer,
    save_hf,
)

__all__ = [
    "DeferredModel",
    "chat_renderer",
    "end_of_turn_ids",
    "family_of",
    "for_inference",
    "load",
    "load_model",
    "load_tokenizer",
    "save_hf",
]
