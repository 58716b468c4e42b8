"""QLoRA: ``model.quantization`` (null | 4bit | 8bit) loads the base model's weights quantized through
bitsandbytes (a CUDA device; ``pip install -e ".[qlora]"``) and trains LoRA adapters on it, as QLoRA does:
4bit is NF4 with double quantization, computing in ``model.dtype``."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

import torch

CHOICES = (None, "4bit", "8bit")


def quantization_problems(cfg: Mapping[str, Any]) -> list[str]:
    """What keeps a model config's ``quantization`` from loading, found before anything is loaded."""
    value = cfg.get("quantization")
    if value is None:
        return []
    if value not in CHOICES:
        return [f"model.quantization={value!r}: choose null, 4bit or 8bit"]
    out = []
    if not cfg.get("lora"):
        out.append(
            f"model.quantization={value}: quantized weights do not train; add LoRA adapters (model.lora, e.g. "
            "model.lora={r: 16}) or set model.quantization=null"
        )
    if str(cfg["name_or_path"]).startswith("tiny:"):
        out.append(
            f"model.quantization={value}: model={cfg['name']} is built in memory, not loaded; quantization "
            "applies to a hub id or a saved model folder"
        )
    if find_spec("bitsandbytes") is None:
        out.append(f'model.quantization={value}: bitsandbytes is not installed (pip install -e ".[qlora]")')
    return out


def quantization_config(cfg: Mapping[str, Any], dtype: torch.dtype):
    """transformers' BitsAndBytesConfig for ``cfg["quantization"]`` (None: no quantization)."""
    value = cfg.get("quantization")
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
