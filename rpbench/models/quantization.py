"""QLoRA: ``model.quantization`` (null | 4bit | 8bit) loads the base model's weights quantized through
bitsandbytes (a CUDA device; ``pip install -e ".[qlora]"``) and trains LoRA adapters on it, as QLoRA does:
4bit is NF4 with double quantization, computing in ``model.dtype``."""

from __future__ import annotations

from importlib.util import find_spec

import torch

from rpbench.models.settings import ModelSettings


def quantization_problems(cfg: ModelSettings) -> list[str]:
    """What keeps a model's ``quantization`` from loading, found before anything is loaded."""
    value = cfg.quantization
    if value is None:
        return []
    out = []
    if cfg.lora is None:
        out.append(
            f"model.quantization={value}: quantized weights do not train; add LoRA adapters (model.lora, e.g. "
            "model.lora={r: 16, alpha: 32, dropout: 0.05, target_modules: null}) or set model.quantization=null"
        )
    if cfg.is_tiny:
        out.append(
            f"model.quantization={value}: model={cfg.name} is built in memory, not loaded; quantization "
            "applies to a hub id or a saved model folder"
        )
    if find_spec("bitsandbytes") is None:
        out.append(f'model.quantization={value}: bitsandbytes is not installed (pip install -e ".[qlora]")')
    return out


def quantization_config(cfg: ModelSettings, dtype: torch.dtype):
    """transformers' BitsAndBytesConfig for ``cfg.quantization`` (None: no quantization)."""
    value = cfg.quantization
    if value is None:
        return None
    problems = quantization_problems(cfg)
    if problems:
        raise ValueError("; ".join(problems))
    from transformers import BitsAndBytesConfig

    if value == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    )
