"""Startup checks of a model config (conf/model/*.yaml) that the loaders would otherwise reject late, as
tracebacks of transformers or peft: dtype, attention implementation, LoRA settings, a local path that
does not exist, a hub id not in the cache while the Hub is offline (``hub_problems``), a saved model
folder that cannot load (``model_folder_problems``); and the model's context (``model_context``), which
bounds what it is asked to generate."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rpbench.models.gguf import GGUFSource, gguf_path
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
    if model.get("gguf_file"):
        try:
            gguf_path(str(model["gguf_file"]))
        except FileNotFoundError as error:
            found.append(str(error).replace("model.", f"{key}.", 1))
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


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
LEGACY_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def model_folder_problems(folder: Path) -> list[str]:
    """What keeps the saved model ``folder`` from loading, each naming its file: ``config.json`` unreadable,
    or of a model type or architecture transformers does not know; weights missing or cut short (each
    safetensors header against its file's size); no tokenizer. No weights are read."""
    found = _config_problems(folder / "config.json")
    found += _weights_problems(folder)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        found.append(f"{folder}: no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save it with the model")
    return found


def _config_problems(path: Path) -> list[str]:
    import transformers
    from transformers import CONFIG_MAPPING

    if not path.is_file():
        return [f"{path}: missing (a saved model's settings)"]
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return [f"{path}: not valid JSON ({error})"]
    if not isinstance(config, dict):
        return [f"{path}: expected a JSON object, got {type(config).__name__}"]
    if "auto_map" in config:  # the model's own code (trust_remote_code) defines its type
        return []
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return [f"{path}: model_type={model_type!r} is not a model type transformers {transformers.__version__} knows"]
    architectures = config.get("architectures") or []
    unknown = [name for name in architectures if not (isinstance(name, str) and hasattr(transformers, name))]
    if unknown:
        return [f"{path}: architectures {unknown} are not classes of transformers {transformers.__version__}"]
    return []


def _weights_problems(folder: Path) -> list[str]:
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            return [f"{index}: not a safetensors index with a weight_map ({type(error).__name__}: {error})"]
    elif (folder / SAFETENSORS).is_file():
        files = [SAFETENSORS]
    elif any((folder / name).is_file() for name in LEGACY_WEIGHTS):
        return []  # pickled weights: their size says nothing without loading them
    else:
        return [f"{folder}: no weights (neither {SAFETENSORS} nor {SAFETENSORS_INDEX}): save the model's weights there"]
    return [problem for name in files if (problem := safetensors_problem(folder / name))]


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with the safetensors file ``path`` from its header alone (missing, cut short, an unreadable
    header); None when its tensors fit in the file."""
    if not path.is_file():
        return f"{path}: missing"
    size = path.stat().st_size
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        if size < 8 or 8 + length > size:
            return f"{path}: cut short ({size} bytes, less than its header; an interrupted download or copy?)"
        try:
            header = json.loads(file.read(length))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError, IndexError) as error:
            return f"{path}: not a safetensors file (its header is unreadable: {type(error).__name__})"
    if 8 + length + end > size:
        need = 8 + length + end
        return f"{path}: cut short ({size} bytes, its tensors need {need}; an interrupted download or copy?)"
    return None


def hub_problems(model: Mapping[str, Any], key: str = "model") -> list[str]:
    """With the Hub offline (HF_HUB_OFFLINE=1), a hub id whose config.json is not in the local Hugging Face
    cache: loading it would fail after the run has started."""
    from huggingface_hub import constants, try_to_load_from_cache

    name = str(model["name_or_path"])
    if not constants.HF_HUB_OFFLINE or name.startswith(TINY_PREFIX) or Path(name).expanduser().is_dir():
        return []
    if model.get("gguf_file"):
        return []  # the weights come from the file (model_problems checks it)
    if _looks_local(name):
        return []  # a local path that does not exist: model_problems names it
    if isinstance(try_to_load_from_cache(name, "config.json", revision=model.get("revision")), str):
        return []
    return [
        f"{key}.name_or_path={name!r}: not a local folder, and not in the Hugging Face cache, which is all "
        f"HF_HUB_OFFLINE=1 lets it load from: download it where there is a network (`hf download {name} "
        f"--local-dir <dir>`) and pass {key}.name_or_path=<dir>, point HF_HOME at a cache that holds it, or unset "
        "HF_HUB_OFFLINE"
    ]


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
    if model.get("gguf_file"):  # its dequantized copy's config, once written (name_or_path is not read)
        try:
            source = GGUFSource.of(str(model["gguf_file"]))
        except FileNotFoundError:  # model_problems names it
            return None
        if not source.converted:
            return None
        name = str(source.folder)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(  # never a download at startup: the cache or the folder only
            name,
            revision=model.get("revision"),
            trust_remote_code=bool(model.get("trust_remote_code")),
            local_files_only=True,
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
