"""Models partitioned by DeepSpeed ZeRO-3: built partitioned, read a parameter or module at a time, gathered
for generation.

Under ``trainer=deepspeed_zero3`` the trained models are not loaded before training: the objective gets a
``DeferredModel`` per model (rpbench.models.loading) and builds it in Lightning's ``configure_model``,
inside ``deepspeed.zero.Init``, while :func:`transformers_see_zero3` tells transformers so.
``from_pretrained`` then creates every layer partitioned and copies the checkpoint's tensors into the
shards (rank 0 reads them), and a tiny model built from a config is initialised module by module on rank 0
(rpbench.models.tiny): no rank holds the whole model.

ZeRO-3 leaves every parameter a shard on each rank (the parameter has a ``ds_id``). An export gathers one
module's own parameters at a time (a LoRA layer with its base layer and adapters) and keeps a CPU copy on the
writing rank only, so the extra memory on a rank is the largest single module, never the model.
Generation gathers the whole model once per batch and pins it: ``generate`` then runs without collectives,
and ranks that stop after different numbers of tokens never wait on each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

PEFT_PREFIX = "base_model.model."  # a peft model's keys; merged, the base model's keys lack it
PINNED = -1  # an id no module has: while listed among a parameter's active modules, DeepSpeed never releases it


def is_partitioned(model: nn.Module) -> bool:
    """Whether ZeRO-3 partitions ``model``'s parameters (each rank holds shards)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def gathered(params: Iterable[nn.Parameter]):
    """A context in which ZeRO-3-partitioned ``params`` are whole on every rank (read only: partitioned again
    on exit); every rank must enter it with the same parameters. A no-op for parameters not partitioned."""
    params = [p for p in params if hasattr(p, "ds_id")]
    if not params:
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """The peft LoRA layers of ``model`` by name; an adapter kind the gathered merge cannot reproduce is refused."""
    if not hasattr(model, "peft_config"):
        return {}
    from peft.tuners.lora import Linear, LoraLayer

    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    for name, layer in layers.items():
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if not isinstance(layer, Linear) or any(layer.use_dora.get(a) or layer.lora_bias.get(a) for a in adapters):
            raise ValueError(
                f"exporting a ZeRO-3 model merges LoRA layer by layer, for plain LoRA on linear layers only; "
                f"{name} is a {type(layer).__name__} (DoRA or LoRA bias: export with trainer=deepspeed_zero2 or ddp)"
            )
    return layers


def _merged_weights(layer: nn.Module) -> dict[str, torch.Tensor]:
    """A gathered LoRA linear layer's base weights with its active adapters merged in, as peft's merge does."""
    base = layer.get_base_layer()
    weight = base.weight.detach().clone()
    for adapter in layer.active_adapters:
        if adapter in layer.lora_A:
            weight += layer.get_delta_weight(adapter)
    return {"weight": weight} | ({"bias": base.bias.detach()} if base.bias is not None else {})


def gathered_state_dict(
    model: nn.Module,
    keep: bool,
    *,
    merge_lora: bool = True,
    include: Callable[[str], bool] | None = None,
    on_gathered: Callable[[str, nn.Module], None] | None = None,
) -> dict[str, torch.Tensor]:
    """``model``'s state dict gathered one module at a time (its own parameters, not its children's), copied
    to the CPU where ``keep`` (the writing rank; the others return ``{}``). Every rank must call it.

    ``merge_lora``: a peft model's LoRA merged into its base weights under the base model's keys (what
    ``merge_and_unload().state_dict()`` holds); otherwise its own keys. ``include``: only the keys it accepts
    (modules with none are not gathered). ``on_gathered(name, module)`` runs while a module is gathered.
    Tensors shared by several keys (tied embeddings) stay one tensor, as in ``state_dict()``.
    """
    include = include or (lambda key: True)
    lora = _lora_layers(model) if merge_lora else {}
    rename = (lambda key: key.removeprefix(PEFT_PREFIX)) if lora else (lambda key: key)
    copies: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}

    def add(key: str, tensor: torch.Tensor) -> None:  # a parameter or buffer: copied once, whatever its keys
        if id(tensor) not in copies:
            copies[id(tensor)] = tensor.detach().to("cpu", copy=True)
        out[key] = copies[id(tensor)]

    for name, module in model.named_modules(remove_duplicate=False):
        prefix = f"{name}." if name else ""
        if any(name.startswith(f"{layer}.") for layer in lora):
            continue  # a LoRA layer's base layer and adapters: merged with the layer
        if name in lora:
            if not any(include(rename(f"{prefix}{key}")) for key in ("weight", "bias")):
                continue
            with gathered(list(module.parameters())):
                if on_gathered:
                    on_gathered(name, module)
                if keep:
                    for key, tensor in _merged_weights(module).items():
                        out[rename(f"{prefix}{key}")] = tensor.to("cpu", copy=True)
            continue
        persistent = [
            (key, b) for key, b in module.named_buffers(recurse=False) if key not in module._non_persistent_buffers_set
        ]
        params = [(key, p) for key, p in module.named_parameters(recurse=False) if include(rename(prefix + key))]
        buffers = [(key, b) for key, b in persistent if b is not None and include(rename(prefix + key))]
        if not params and not buffers:
            continue
        with gathered([p for _, p in params]):
            if on_gathered:
                on_gathered(name, module)
            if keep:
                for key, tensor in params + buffers:
                    add(rename(prefix + key), tensor)
    return out


@contextmanager
def gathered_for_generation(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """The whole of a partitioned ``model`` gathered on every rank (a collective: every rank enters) and kept
    gathered through any number of forward passes, then partitioned again. No-op for other models."""
    if not enabled or not is_partitioned(model):
        yield
        return
    params = list(model.parameters())
    with gathered(params):
        for param in params:  # DeepSpeed's post-forward hooks would release (and re-gather per token) otherwise
            param.ds_active_sub_modules.add(PINNED)
        try:
            yield
        finally:
            for param in params:
                param.ds_active_sub_modules.discard(PINNED)


def full_shape(param: nn.Parameter) -> tuple[int, ...]:
    """The parameter's shape, also when partitioned (its local tensor is then empty)."""
    return tuple(getattr(param, "ds_shape", param.shape))


def full_numel(param: nn.Parameter) -> int:
    """The parameter's element count, also when partitioned."""
    return int(getattr(param, "ds_numel", param.numel()))


def held_numel(param: nn.Parameter) -> int:
    """The elements of the parameter this rank holds: its shard when partitioned."""
    shard = getattr(param, "ds_tensor", None)
    return param.numel() + (shard.numel() if shard is not None else 0)


@contextmanager
def transformers_see_zero3(config: Mapping[str, Any]) -> Iterator[None]:
    """While inside, transformers builds models for ZeRO-3 (``is_deepspeed_zero3_enabled()``): partitioned
    at creation, checkpoints loaded into the shards. Left before evaluation, which loads whole models."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    seen = HfDeepSpeedConfig(dict(config))  # transformers keeps a weak reference: alive until the end
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del seen


def initialise_partitioned_lora(model: nn.Module) -> None:
    """Redo peft's adapter initialisation on a ZeRO-3-partitioned model (a collective: every rank calls it).

    peft initialises an adapter after creating its layers; on partitioned layers (empty local tensors) that
    initialisation does nothing, and ``lora_B`` would keep a random init instead of zeros. Here each layer's
    adapters are gathered, initialised by peft on rank 0, and partitioned back from rank 0's values."""
    import deepspeed
    from peft.tuners.lora import LoraLayer

    for module in model.modules():
        if isinstance(module, LoraLayer):
            params = [p for adapters in (module.lora_A, module.lora_B) for p in adapters.parameters()]
            with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
                for adapter in module.lora_A:
                    module.reset_lora_parameters(adapter, model.peft_config[adapter].init_lora_weights)
