"""Startup checks of a model config (conf/model/*.yaml) that the loaders would otherwise reject late, as
tracebacks of transformers or peft: dtype, attention implementation, LoRA settings, and a local path that
does not exist (a hub id cannot be checked offline: its download error names it); and the model's context
(``model_context``), which bounds what it is asked to generate."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rpbench.models.loading import DTYPES, TINY_PREFIX
from rpbench.models.tiny import TINY_DEFAULTS

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


def config_context(config: Any) -> int | None:
    """The positions (prompt plus reply) a Hugging Face model config allows: its text config's
    ``max_position_embeddings``; None when it gives none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def model_context(model: Mapping[str, Any]) -> int | None:
    """The context of the model config ``model`` before loading it: a tiny model's ``tiny`` sizes over
    TINY_DEFAULTS, else the weights' config.json (a local folder, or a hub id already downloaded); None when
    that cannot be read here (the loaded model is checked again before it generates)."""
    name = str(model.get("name_or_path"))
    if name.startswith(TINY_PREFIX):
        return int({**TINY_DEFAULTS, **dict(model.get("tiny") or {})}["max_position_embeddings"])
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            name, revision=model.get("revision"), trust_remote_code=bool(model.get("trust_remote_code"))
        )
    except (OSError, ValueError):
        return None
    return config_context(config)


def generation_length_problems(max_new_tokens: int, context: int | None, key: str, model: str) -> list[str]:
    """``max_new_tokens`` (the setting ``key``) must leave the prompt room in the ``model``'s ``context``."""
    if context is None or max_new_tokens < context:
        return []
    return [
        f"{key}={max_new_tokens}: model {model} has a context of {context} tokens (max_position_embeddings of its "
        "config): expected fewer new tokens, leaving room for the prompt"
    ]
