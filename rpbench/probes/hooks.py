"""Forward hooks on named module inputs/outputs of any HF decoder.

A hook point is named by a *key*: the module's canonical name (PEFT and torch.compile
prefixes removed), followed by ``:input`` when the module's first input is observed
instead of its output. Keys are stable across LoRA-wrapped and merged models, so
statistics and neuron lists from one can be applied to the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from rpbench.models.families import family_or_base

INPUT_SUFFIX = ":input"

_WRAPPER_PREFIXES = re.compile(r"^(?:base_model\.model\.|_orig_mod\.)+")

ActivationFn = Callable[[str, torch.Tensor], "torch.Tensor | None"]


@dataclass(frozen=True)
class HookPoint:
    """One observed tensor: `key` names it, `capture` is "output" or "input"."""

    key: str
    module: nn.Module
    capture: str


def canonical_name(name: str) -> str:
    """Module name without PEFT (`base_model.model.`) or torch.compile (`_orig_mod.`) prefixes."""
    return _WRAPPER_PREFIXES.sub("", name.replace("._orig_mod.", "."))


def split_key(key: str) -> tuple[str, str]:
    """`"a.b:input"` -> ("a.b", "input"); `"a.b"` -> ("a.b", "output")."""
    if key.endswith(INPUT_SUFFIX):
        return key[: -len(INPUT_SUFFIX)], "input"
    return key, "output"


def _decoder_prefix(model: nn.Module) -> str:
    """Canonical name of the text decoder inside `model` ("" when it is the model itself)."""
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else model
    for name, module in model.named_modules():
        if module is decoder:
            return canonical_name(name)
    return ""


def hook_presets(model: nn.Module) -> dict[str, tuple[str, str]]:
    """Preset -> (pattern, side) of the registered family covering ``model``; the base family's
    (the Llama/Qwen decoder shape) when no family covers it."""
    return dict(family_or_base(model).hook_presets)


def resolve_hook_points(model: nn.Module, modules: str | Sequence[str]) -> list[HookPoint]:
    """Hook points for the model family's presets (e.g. "attn_out", "mlp_act", "mlp_out", "residual";
    rpbench.models.families) or regex patterns.

    A pattern matches a suffix of a module name on dot boundaries; append ``:input`` to
    observe the module's input. Points come in module order (layer 0 first).
    """
    specs = [modules] if isinstance(modules, str) else list(modules)
    if not specs:
        raise ValueError("probe.modules: expected a preset or module pattern, got an empty list")
    named = [(canonical_name(n), m) for n, m in model.named_modules()]
    points: dict[str, HookPoint] = {}
    presets = hook_presets(model)
    for spec in specs:
        if spec in presets:
            pattern, capture = presets[spec]
            prefix = _decoder_prefix(model)
        else:
            pattern, capture = split_key(spec)
            prefix = ""
        regex = re.compile(rf"(?:^|\.){pattern}$")
        matched = [(n, m) for n, m in named if regex.search(n) and (not prefix or n.startswith(prefix + "."))]
        if not matched:
            sample = ", ".join(n for n, _ in named[1:8])
            raise ValueError(
                f"probe.modules: {spec!r} matches no module of {type(model).__name__} "
                f"(first module names: {sample}, ...)"
            )
        for name, module in matched:
            key = name + (INPUT_SUFFIX if capture == "input" else "")
            points.setdefault(key, HookPoint(key, module, capture))
    order = {id(m): i for i, (_, m) in enumerate(named)}
    return sorted(points.values(), key=lambda p: (order[id(p.module)], p.capture))


def find_hook_points(model: nn.Module, keys: Iterable[str]) -> list[HookPoint]:
    """Hook points for exact keys (canonical module names, optionally with ``:input``)."""
    by_name = {canonical_name(n): m for n, m in model.named_modules()}
    points = []
    for key in keys:
        name, capture = split_key(key)
        if name not in by_name:
            near = [n for n in by_name if n.split(".")[-1] == name.split(".")[-1]][:4]
            raise KeyError(f"no module named {name!r} in {type(model).__name__} (similar: {near})")
        points.append(HookPoint(key, by_name[name], capture))
    return points


def primary_tensor(value, where: str) -> torch.Tensor:
    """The tensor a module returns, or the first element of a tuple/list output."""
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: expected a tensor or a tuple starting with one, got {type(value).__name__}")
    return value


def replace_primary(value, tensor: torch.Tensor):
    """`value` with its primary tensor replaced, keeping the tuple/list structure."""
    if isinstance(value, (tuple, list)):
        return type(value)([tensor, *value[1:]])
    return tensor


def _output_hook(key: str, fn: ActivationFn):
    def hook(module, args, output):
        new = fn(key, primary_tensor(output, key))
        return None if new is None else replace_primary(output, new)

    return hook


def _input_hook(key: str, fn: ActivationFn):
    def hook(module, args):
        new = fn(key, primary_tensor(args, key))
        return None if new is None else replace_primary(args, new)

    return hook


@contextmanager
def attach(points: Sequence[HookPoint], fn: ActivationFn, prepend: bool = False) -> Iterator[None]:
    """Call `fn(key, tensor)` on each point's tensor during forward; a returned tensor replaces it.

    Hooks are removed on exit, also when the body raises.
    """
    handles = []
    try:
        for p in points:
            if p.capture == "input":
                handles.append(p.module.register_forward_pre_hook(_input_hook(p.key, fn), prepend=prepend))
            else:
                handles.append(p.module.register_forward_hook(_output_hook(p.key, fn), prepend=prepend))
        yield
    finally:
        for handle in handles:
            handle.remove()
