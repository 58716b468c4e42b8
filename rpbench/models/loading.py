"""Build the tokenizer and model a model's settings (``ModelSettings``, rpbench.models.settings) name: tiny
offline ones, or real ones by hub id / path, or from a GGUF file (rpbench.models.gguf); then dtype,
checkpointing, a frozen vision tower, LoRA (peft) and QLoRA (rpbench.models.quantization)."""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from rpbench.core.atomic import partial_path, publish
from rpbench.data.chat import ChatRenderer
from rpbench.models.chat_templates import load_chat_template
from rpbench.models.families import ModelFamily, family_named
from rpbench.models.gguf import GGUFSource, convert, gguf_tokenizer
from rpbench.models.quantization import quantization_config
from rpbench.models.settings import LoraSettings, ModelSettings
from rpbench.models.zero3 import full_numel, gathered_state_dict, initialise_partitioned_lora, is_partitioned

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def family_of(cfg: ModelSettings) -> type[ModelFamily]:
    """The registered family of a model (``model.family``)."""
    return family_named(cfg.family)


def chat_renderer(cfg: ModelSettings, tokenizer, max_length: int) -> ChatRenderer:
    """The renderer of a model's conversations: its end-of-turn token, its family's messages."""
    return family_renderer(family_of(cfg), tokenizer, max_length, cfg.end_of_turn)


def family_renderer(
    family: type[ModelFamily], tokenizer, max_length: int, end_of_turn: str | None = None
) -> ChatRenderer:
    """A renderer with ``family``'s messages; for a family that takes images, image placeholders expanded to
    the images' token counts and image spans kept whole by every cut."""
    expand = tokenizer.expand_image_tokens if family.takes_images else None
    spans = tokenizer.image_spans if family.takes_images else None
    return ChatRenderer(
        tokenizer, end_of_turn, max_length, messages=family.messages, expand_images=expand, image_spans=spans
    )


def _offline_hint(name: str, error: Exception) -> OSError:
    return OSError(
        f"could not load {name!r} ({type(error).__name__}: {error}). If this machine is offline, download it "
        f"elsewhere (`hf download {name} --local-dir <dir>`), copy the folder here and pass "
        "model.name_or_path=<dir>, or point HF_HOME at a cache that holds it."
    )


def load_tokenizer(cfg: ModelSettings):
    """The tokenizer for ``cfg``, with the configured chat template and a pad token."""
    name = cfg.name_or_path
    family = family_of(cfg)
    if cfg.is_tiny:
        tokenizer = family.build_tiny_tokenizer(int(cfg.tiny["vocab_size"]))
    elif cfg.gguf_file:  # the file's own tokenizer: checked (end of turn, template) before any weights load
        source = GGUFSource.of(cfg.gguf_file)
        if source.converted:
            tokenizer = family.load_tokenizer(str(source.folder), revision=None, trust_remote_code=False)
        else:
            tokenizer = gguf_tokenizer(source.path)
    else:
        try:
            tokenizer = family.load_tokenizer(name, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
        except (OSError, ValueError) as error:
            raise _offline_hint(name, error) from error
    if cfg.chat_template:
        tokenizer.chat_template = load_chat_template(cfg.chat_template)
    if not tokenizer.chat_template:
        raise ValueError(f"{name!r} has no chat template: set model.chat_template (e.g. qwen2.5 or llama3)")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    end_of_turn_ids(cfg, tokenizer)  # a wrong model.end_of_turn stops here, before any weights load
    return tokenizer


def end_of_turn_ids(cfg: ModelSettings, tokenizer) -> list[int]:
    """Token ids that end an assistant turn: the model's ``end_of_turn`` and the tokenizer's eos."""
    tokens = [cfg.end_of_turn, tokenizer.eos_token]
    ids = []
    for token in tokens:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == tokenizer.unk_token_id:
            raise ValueError(f"model.end_of_turn={token!r} is not a single token of {cfg.name_or_path!r}")
        if token_id not in ids:
            ids.append(token_id)
    return ids


def load_model(cfg: ModelSettings, tokenizer) -> PreTrainedModel:
    """The model for ``cfg``: tiny random-init or ``from_pretrained``; then dtype, checkpointing, LoRA.

    Under ZeRO-3 (rpbench.models.zero3) the model is built partitioned, in the precision the engine sets."""
    name = cfg.name_or_path
    family = family_of(cfg)
    dtype = DTYPES[cfg.dtype]
    attn = cfg.attn_implementation
    if cfg.is_tiny:
        overrides = {k: v for k, v in cfg.tiny.items() if k != "vocab_size"}
        model = family.build_tiny_model(tokenizer, overrides, cfg.init_seed, attn)
        if not is_partitioned(model):
            model = model.to(dtype)
    else:
        quantized = quantization_config(cfg, dtype)
        source = GGUFSource.of(cfg.gguf_file) if cfg.gguf_file else None
        if source is not None:
            name = str(gguf_weights(source, tokenizer))
        try:
            model = family.load_pretrained(
                name,
                dtype=dtype,
                attn_implementation=attn,
                revision=cfg.revision,
                trust_remote_code=cfg.trust_remote_code,
                **({"quantization_config": quantized} if quantized is not None else {}),
            )
        except (OSError, ValueError) as error:
            raise _offline_hint(name, error) from error
        if source is not None:  # named by what it was converted from, not by the cache folder's path
            model.name_or_path = f"{cfg.name_or_path} (GGUF {source.path.name}, sha256 {source.sha256[:16]})"
    if family.vision_module is not None:
        if cfg.freeze_vision is None:
            raise ValueError(f"model {name!r} has a vision tower: set model.freeze_vision to true (frozen) or false")
        if cfg.freeze_vision:
            tower = vision_tower(model, family.vision_module).requires_grad_(False)
            frozen = sum(full_numel(p) for p in tower.parameters())
            log.info("model.freeze_vision=true: the vision tower's %s parameters are frozen", f"{frozen:,}")
    eot = end_of_turn_ids(cfg, tokenizer)
    model.generation_config.eos_token_id = eot
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if cfg.quantization:  # QLoRA: norms in float32, inputs requiring grad for checkpointing
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if cfg.gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if cfg.lora is not None:
        model = apply_lora(
            model,
            cfg.lora,
            gradient_checkpointing=cfg.gradient_checkpointing,
            task=family.lora_task_type,
            exclude=family.vision_module,
            default_targets=family.lora_target_modules,
        )
    return model


def gguf_weights(source: GGUFSource, tokenizer) -> Path:
    """The plain Hugging Face folder of a GGUF checkpoint: its cached dequantized copy, written on first use."""
    return source.folder if source.converted else convert(source, tokenizer)


def vision_tower(model, module_name: str):
    """The module named ``module_name`` (last dotted part) inside ``model``: its vision tower."""
    found = [module for name, module in model.named_modules() if name.rsplit(".", 1)[-1] == module_name]
    if len(found) != 1:
        raise ValueError(f"{type(model).__name__} holds {len(found)} modules named {module_name!r}, expected one")
    return found[0]


def apply_lora(
    model: PreTrainedModel,
    lora: LoraSettings,
    gradient_checkpointing: bool,
    task: str,
    exclude: str | None,
    default_targets: Sequence[str],
):
    """Wrap ``model`` with peft LoRA adapters (only adapter weights train); ``exclude``: a module (e.g. the
    vision tower) whose layers get no adapter, whatever ``target_modules`` names; ``default_targets``: the
    modules adapted when ``target_modules`` is not given (the model family's)."""
    from peft import LoraConfig, get_peft_model

    targets = lora.target_modules or list(default_targets)
    if not targets:
        raise ValueError("model.lora: set target_modules (the model's family names no default)")
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        exclude_modules=rf"(.*\.)?{re.escape(exclude)}\..*" if exclude else None,
        task_type=task,
    )
    if gradient_checkpointing:
        model.enable_input_require_grads()
    model = get_peft_model(model, config)
    if is_partitioned(model):
        initialise_partitioned_lora(model)
    return model


def load(cfg: ModelSettings):
    """(model, tokenizer) for a model's settings."""
    tokenizer = load_tokenizer(cfg)
    return load_model(cfg, tokenizer), tokenizer


@dataclass(frozen=True)
class DeferredModel:
    """A model's settings and its tokenizer, to build later (under ZeRO-3 inside the engine's init context, so
    that the model is partitioned as it is created; see rpbench.models.zero3)."""

    cfg: ModelSettings
    tokenizer: Any

    def build(self) -> nn.Module:
        return load_model(self.cfg, self.tokenizer)


def inference_device(trainer_cfg: Mapping[str, Any]) -> torch.device:
    """This process's GPU when the trainer config uses GPUs and one is present, else the CPU."""
    if trainer_cfg.get("accelerator") in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def for_inference(model, tokenizer, model_cfg: ModelSettings, trainer_cfg: Mapping[str, Any], saved: Path | None):
    """The model ready for generation and probing on this process's device.

    Lightning leaves a trained model on the CPU; under ZeRO-3 it was built inside the objective (``model``
    is a DeferredModel) or left partitioned, so it is reloaded whole from the run's Hugging Face export ``saved``.
    """
    if isinstance(model, DeferredModel) or is_partitioned(model):
        if saved is None or not saved.is_dir():
            raise ValueError("evaluating a ZeRO-3-trained model needs its export: set save_model=true")
        model = load_model(replace(model_cfg, name_or_path=str(saved), lora=None), tokenizer)
    return model.to(inference_device(trainer_cfg)).eval()


def save_hf(
    model,
    tokenizer,
    out_dir: str | Path,
    merge_lora: bool = True,
    lora_adapter: bool = False,
    weights: Mapping[str, torch.Tensor] | None = None,
    adapter_weights: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Save in Hugging Face format (LoRA merged into the base weights unless ``merge_lora`` is false;
    with ``lora_adapter`` a LoRA model's adapter alone also goes to ``<out_dir>/adapter``).

    ``weights`` / ``adapter_weights``: the state dicts to write instead of the model's own (a ZeRO-3 model's,
    gathered by ``rpbench.models.zero3``; ``weights`` with any LoRA already merged).
    Written to a hidden sibling folder and renamed into place when complete: a kill mid-export never
    leaves a half-written ``out_dir`` (e.g. config files without weights)."""
    out = Path(out_dir)
    partial = partial_path(out)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if lora_adapter and hasattr(model, "peft_config"):
        given = {} if adapter_weights is None else {"state_dict": dict(adapter_weights)}
        model.save_pretrained(partial / "adapter", **given)  # before merging, which removes the adapter layers
    if weights is not None:  # LoRA already merged in them
        base = model.get_base_model() if hasattr(model, "peft_config") else model
        base.save_pretrained(partial, state_dict=dict(weights))
    else:
        if merge_lora and hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
        model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    return publish(partial, out)


def save_hf_partitioned(model, tokenizer, out_dir: str | Path, write: bool, lora_adapter: bool = False) -> Path | None:
    """``save_hf`` for a ZeRO-3 model: every rank takes part in gathering, the ``write`` rank saves (LoRA
    merged; with ``lora_adapter`` the adapter alone too). Returns the folder where written."""
    adapter = None
    if lora_adapter and hasattr(model, "peft_config"):
        adapter = gathered_state_dict(model, write, merge_lora=False, include=lambda key: "lora_" in key)
    weights = gathered_state_dict(model, write)
    if not write:
        return None
    return save_hf(model, tokenizer, out_dir, lora_adapter=lora_adapter, weights=weights, adapter_weights=adapter)
