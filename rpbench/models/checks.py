"""Startup checks of a model config (conf/model/*.yaml) that the loaders would otherwise reject late, as
tracebacks of transformers or peft: dtype, attention implementation, LoRA settings, and a local path that
does not exist (a hub id cannot be checked offline: its download error names it)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rpbench.models.loading import DTYPES, TINY_PREFIX

ATTENTION = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")


def _looks_local(name: str) -> bool:
    """A path rather than a hub id (``<org>/<name>`` or a legacy bare name such as ``gpt2``)."""
    return name.startswith(("/", ".", "~")) or ("/" in name and not HUB_ID.match(name))


def model_problems(model: Mapping[str, Any], key: str = "model") -> list[str]:
    """What is wrong with the model config ``model`` (reported under ``key``)."""
    found = []
    name = str(model.get("name_or_path"))
    if not name.startswith(TINY_PREFIX) and _looks_local(name) and not Path(name).expanduser().is_dir():
        found.append(
            f"{key}.name_or_path={name!r}: expected a Hugging Face hub id (<org>/<name>), a local model folder "
            f"that exists, or {TINY_PREFIX}<family>"
        )
    if str(model.get("dtype")) not in DTYPES:
        found.append(f"{key}.dtype={model.get('dtype')!r}: choose one of {', '.join(DTYPES)}")
    if str(model.get("attn_implementation")) not in ATTENTION:
        found.append(
            f"{key}.attn_implementation={model.get('attn_implementation')!r}: choose one of {', '.join(ATTENTION)}"
        )
    lora = model.get("lora")
    if lora is not None:
        found += lora_problems(lora, f"{key}.lora")
    return found


def lora_problems(lora: Any, key: str) -> list[str]:
    if not isinstance(lora, Mapping):
        return [f"{key}={lora!r}: expected null or a mapping with {', '.join(LORA_KEYS)}"]
    found = [f"{key}.{k}: unknown key; valid keys: {', '.join(LORA_KEYS)}" for k in lora if k not in LORA_KEYS]
    r, alpha, dropout = lora.get("r"), lora.get("alpha"), lora.get("dropout")
    if r is not None and not (isinstance(r, int) and not isinstance(r, bool) and r >= 1):
        found.append(f"{key}.r={r!r}: expected an integer rank >= 1")
    if alpha is not None and not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha > 0):
        found.append(f"{key}.alpha={alpha!r}: expected a number > 0")
    if dropout is not None and not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
        found.append(f"{key}.dropout={dropout!r}: expected a probability in [0, 1)")
    targets = lora.get("target_modules")
    if targets is not None and (
        isinstance(targets, str)
        and targets != "all-linear"
        or not isinstance(targets, (str, list, tuple))
        or not targets
    ):
        found.append(f"{key}.target_modules={targets!r}: expected a list of module names or 'all-linear'")
    return found
