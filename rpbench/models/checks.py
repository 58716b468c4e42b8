"""Startup checks of a model that the loaders would otherwise reject late, as tracebacks of transformers: a hub
id not in the cache while the Hub is offline (``hub_problems``), a saved model folder that cannot load
(``model_folder_problems``); and the model's context (``model_context``), which bounds what it is asked to
generate. The settings' own values are checked as they are parsed (rpbench.models.settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rpbench.models.gguf import GGUFSource, gguf_path
from rpbench.models.settings import TINY_PREFIX, ModelSettings, looks_local
from rpbench.models.tiny import TINY_DEFAULTS

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


def source_problems(model: ModelSettings, key: str = "model") -> list[str]:
    """Where the weights come from, on this machine: a local folder that does not exist, a GGUF file or package
    that is not there (a hub id is checked by ``hub_problems``, only when the run loads the model)."""
    found = []
    name = model.name_or_path
    if not model.is_tiny and looks_local(name) and not Path(name).expanduser().is_dir():
        found.append(
            f"{key}.name_or_path={name!r}: expected a Hugging Face hub id (<org>/<name>), a local model folder "
            f"that exists, or {TINY_PREFIX}<family>"
        )
    if model.gguf_file:
        try:
            gguf_path(model.gguf_file)
        except FileNotFoundError as error:
            found.append(str(error).replace("model.", f"{key}.", 1))
    return found


HUB_PROBE_TIMEOUT_S = 3.0  # one request for config.json, no retries: a run fails in seconds, not minutes


def hub_problems(model: ModelSettings, key: str = "model") -> list[str]:
    """A hub id the run could not load, found before it starts: with the Hub offline (HF_HUB_OFFLINE=1) one
    whose config.json is not in the local Hugging Face cache; online, one the Hub does not answer for (no
    network, no such model, a gated model without access), asked once with a short timeout."""
    from huggingface_hub import constants, try_to_load_from_cache

    name = model.name_or_path
    if model.is_tiny or Path(name).expanduser().is_dir() or model.gguf_file or looks_local(name):
        return []  # a gguf file, or a local path that does not exist: the settings' check names it
    if isinstance(try_to_load_from_cache(name, "config.json", revision=model.revision), str):
        return []
    if constants.HF_HUB_OFFLINE:
        return [
            f"{key}.name_or_path={name!r}: not a local folder, and not in the Hugging Face cache, which is all "
            f"HF_HUB_OFFLINE=1 lets it load from: download it where there is a network (`hf download {name} "
            f"--local-dir <dir>`) and pass {key}.name_or_path=<dir>, point HF_HOME at a cache that holds it, or "
            "unset HF_HUB_OFFLINE"
        ]
    why = hub_unreachable(name, model.revision)
    return [f"{key}.name_or_path={name!r}: {why}"] if why else []


def hub_unreachable(name: str, revision: str | None) -> str | None:
    """Why the Hub does not serve ``name``'s config.json (None when it does), from one request."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        url = hf_hub_url(name, "config.json", revision=revision, endpoint=constants.ENDPOINT)
        get_hf_file_metadata(url, timeout=HUB_PROBE_TIMEOUT_S, endpoint=constants.ENDPOINT)
    except GatedRepoError:
        return "a gated model: accept its licence on the Hub and log in (`hf auth login`, or set HF_TOKEN)"
    except RepositoryNotFoundError:
        return "no such model on the Hub (or a private one this token cannot see): check the id"
    except RevisionNotFoundError:
        return f"the Hub has no revision {revision!r} of it (model.revision)"
    except RemoteEntryNotFoundError:
        return "the Hub repository has no config.json: not a transformers model"
    except HfHubHTTPError as error:
        return f"the Hub answered {error.response.status_code if error.response is not None else 'an error'}"
    except Exception as error:
        if not is_network_error(error):
            raise
        return (
            f"not in the Hugging Face cache, and the Hub ({constants.ENDPOINT}) cannot be reached "
            f"({type(error).__name__}: {error}): offline? download it where there is a network "
            f"(`hf download {name}`), or set HF_HUB_OFFLINE=1 to use the cache alone"
        )
    return None


def is_network_error(error: BaseException) -> bool:
    """No network, DNS, a refused connection or a timeout: an OSError, or the Hub client's transport error
    (whichever HTTP library it is built on)."""
    return isinstance(error, OSError) or any(cls.__name__ == "TransportError" for cls in type(error).__mro__)


def config_context(config: Any) -> int | None:
    """The positions (prompt plus reply) a Hugging Face model config allows: its text config's
    ``max_position_embeddings``; None when it gives none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def model_context(model: ModelSettings) -> int | None:
    """The context of the model config ``model`` before loading it: a tiny model's ``tiny`` sizes over
    TINY_DEFAULTS, else the weights' config.json (a local folder, or a hub id already downloaded); None when
    that cannot be read here (the loaded model is checked again before it generates)."""
    name = model.name_or_path
    if model.is_tiny:
        return int({**TINY_DEFAULTS, **dict(model.tiny)}["max_position_embeddings"])
    if model.gguf_file:  # its dequantized copy's config, once written (name_or_path is not read)
        try:
            source = GGUFSource.of(model.gguf_file)
        except FileNotFoundError:  # the settings' check names it
            return None
        if not source.converted:
            return None
        name = str(source.folder)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(  # never a download at startup: the cache or the folder only
            name,
            revision=model.revision,
            trust_remote_code=model.trust_remote_code,
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
