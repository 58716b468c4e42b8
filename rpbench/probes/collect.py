"""Run a model over prompt batches and stream its activations into FrequencyStats."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

from rpbench.core.progress_bar import progress_bar
from rpbench.probes.hooks import attach, resolve_hook_points
from rpbench.probes.stats import FrequencyStats, ProbeSettings

PROBE_ONLY_KEYS = ("prompt_lengths",)


def last_prompt_index(attention_mask: torch.Tensor, prompt_lengths: torch.Tensor | None) -> torch.Tensor:
    """Position of each row's last prompt token, for left- or right-padded rows.

    `prompt_lengths[b]` counts the real prompt tokens of row b; without it the whole row
    is prompt and its last real token is taken.
    """
    real = attention_mask.long()
    n_real = real.sum(dim=1)
    lengths = n_real if prompt_lengths is None else prompt_lengths.to(real.device).long()
    bad = (lengths < 1) | (lengths > n_real)
    if bad.any():
        row = int(bad.nonzero()[0])
        raise ValueError(
            f"batch row {row}: prompt_lengths={int(lengths[row])} but the row has {int(n_real[row])} real tokens"
        )
    hit = (real.cumsum(dim=1) == lengths[:, None]) & real.bool()
    return hit.int().argmax(dim=1)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counting real tokens only, so left padding does not shift positions."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def _membership(sample_dims: Sequence[Sequence[str]], dims: list[str]) -> torch.Tensor:
    """[D, B] 0/1: sample b belongs to dims[d] (indexed by row_sample to get [D, observations])."""
    member = torch.zeros(len(dims), len(sample_dims))
    index = {d: i for i, d in enumerate(dims)}
    for b, names in enumerate(sample_dims):
        for name in names:
            member[index[name], b] = 1
    return member


def _normalise_dims(batch_dims: Sequence, batch_index: int, batch_size: int) -> list[tuple[str, ...]]:
    if len(batch_dims) != batch_size:
        raise ValueError(f"batch {batch_index}: {batch_size} samples but {len(batch_dims)} dimension entries")
    out = []
    for b, entry in enumerate(batch_dims):
        names = (entry,) if isinstance(entry, str) else tuple(entry)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"batch {batch_index}, sample {b}: expected one or more dimension names, got {entry!r}")
        out.append(names)
    return out


def _check_unsharded(model: nn.Module) -> None:
    for name, param in model.named_parameters():
        if param.numel() == 0:
            raise RuntimeError(
                f"parameter {name} holds no local elements (sharded by ZeRO-3/FSDP); "
                "probes need an unsharded evaluation model"
            )


def collect_frequencies(
    model: nn.Module,
    batches: Iterable[Mapping[str, torch.Tensor]],
    dims_per_batch: Iterable[Sequence],
    settings: ProbeSettings,
) -> FrequencyStats:
    """Top-p% frequencies of `model`'s probed activations, per evaluation dimension.

    batches: dicts with `input_ids` and `attention_mask` [B, T] (either padding side),
        optional `prompt_lengths` [B] (real prompt tokens per row; default: whole row);
        every other key is passed to the model. `position_ids` default to real-token counts.
    dims_per_batch: per batch, one entry per sample: a dimension name or a list of names.
    settings: what is observed and counted.
    """
    _check_unsharded(model)
    points = resolve_hook_points(model, settings.modules)
    stats = FrequencyStats([p.key for p in points], settings)
    layer_of = {p.key: i for i, p in enumerate(points)}
    device = next(model.parameters()).device
    current: dict = {}

    def observe(key: str, tensor: torch.Tensor) -> None:
        rows, row_sample = current["rows"], current["row_sample"]
        if tensor.shape[:2] != current["shape"]:
            raise ValueError(f"{key}: activation shape {tuple(tensor.shape)} is not [batch, tokens, width]")
        acts = tensor[rows] if settings.position == "all" else tensor[row_sample, rows]
        stats.update(layer_of[key], acts.detach(), current["membership"], current["dims"])

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), attach(points, observe):
            for i, (batch, batch_dims) in enumerate(
                progress_bar(zip(batches, dims_per_batch, strict=True), desc="probe", unit="batch")
            ):
                mask = batch["attention_mask"].to(device)
                sample_dims = _normalise_dims(batch_dims, i, mask.shape[0])
                dims = sorted({d for names in sample_dims for d in names})
                if settings.position == "all":
                    rows = mask.bool()
                    row_sample = rows.nonzero()[:, 0]
                else:
                    rows = last_prompt_index(mask, batch.get("prompt_lengths"))
                    row_sample = torch.arange(mask.shape[0], device=device)
                current.update(
                    rows=rows,
                    row_sample=row_sample,
                    shape=tuple(mask.shape),
                    dims=dims,
                    membership=_membership(sample_dims, dims)[:, row_sample.cpu()].to(device),
                )
                inputs = {
                    k: v.to(device) if isinstance(v, torch.Tensor) else v
                    for k, v in batch.items()
                    if k not in PROBE_ONLY_KEYS
                }
                inputs.setdefault("position_ids", positions_from_mask(mask))
                model(**inputs)
    finally:
        model.train(was_training)
    return stats
