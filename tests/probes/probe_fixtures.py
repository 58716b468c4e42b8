"""Tiny CPU models and padded batches for the probe tests."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

VOCAB = 97
PAD = 0

FAMILIES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}


def tiny_model(family: str = "llama", seed: int = 0, layers: int = 2):
    """A randomly initialised decoder with hidden size 32 and `layers` layers, in eval mode."""
    config_cls, model_cls = FAMILIES[family]
    torch.manual_seed(seed)
    config = config_cls(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=2,
    )
    return model_cls(config).eval()


def random_sequences(n: int, seed: int = 0, min_len: int = 3, max_len: int = 9) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=gen)
    return [torch.randint(3, VOCAB, (int(k),), generator=gen) for k in lengths]


def pad_batch(seqs: list[torch.Tensor], side: str, pad_id: int = PAD) -> dict[str, torch.Tensor]:
    """input_ids and attention_mask for `seqs`, padded on `side` ("left" or "right")."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        span = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        ids[row, span] = seq
        mask[row, span] = 1
    return {"input_ids": ids, "attention_mask": mask}
