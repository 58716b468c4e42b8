"""Rendered samples -> batches: dynamic padding, and sequence packing into token-budget batches.

A rendered sample is ``{"input_ids": [...], "labels": [...], **extra}`` with ``labels[t] == -100`` where
token ``t`` is not supervised. Labels follow the Hugging Face convention in every batch: ``labels[t]``
is the target *of position t*, predicted from position ``t - 1`` (the model side shifts; see
``rpbench.models.forward``). Extra keys (e.g. ``id``) travel as lists, one entry per sample.

The first label of every sample is set to -100 in every batch: nothing inside the sample precedes
it, so it is never predicted in a forward of the sample alone, and in a batch the position before
it is padding (left padding) or the previous packed sample, which must not learn to predict it.
So collation changes no loss term. Each sample's last label stays: it is predicted from inside the
sample, and nothing predicts from the last position across a boundary.

Packed batches are one row holding several samples back to back, with position ids restarting at 0
per sample and ``cu_seqlens`` marking the boundaries.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch

from rpbench.data.chat import IGNORE_INDEX

TOKEN_KEYS = ("input_ids", "labels")
Sample = Mapping[str, Any]


def _sample_name(index: int, sample: Sample) -> str:
    return f"sample {index}" + (f" (id {sample['id']!r})" if "id" in sample else "")


def _lengths(samples: Sequence[Sample]) -> list[int]:
    """Token counts, after checking every sample has equally long, non-empty input_ids and labels."""
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    lengths = []
    for index, sample in enumerate(samples):
        n_ids, n_labels = len(sample["input_ids"]), len(sample["labels"])
        if n_ids == 0 or n_ids != n_labels:
            raise ValueError(
                f"{_sample_name(index, sample)}: field 'labels': expected one label per input id "
                f"and at least one token, got {n_ids} input ids and {n_labels} labels"
            )
        lengths.append(n_ids)
    return lengths


def _extra_fields(samples: Sequence[Sample]) -> dict[str, list[Any]]:
    keys = dict.fromkeys(key for sample in samples for key in sample if key not in TOKEN_KEYS)
    return {key: [sample.get(key) for sample in samples] for key in keys}


def pad_collate(
    samples: Sequence[Sample],
    pad_token_id: int,
    padding_side: Literal["right", "left"] = "right",
    pad_to_multiple_of: int | None = None,
) -> dict[str, Any]:
    """Pad to the longest sample: ``input_ids``, ``attention_mask``, ``labels``, ``position_ids`` [B, T].

    Position ids count real tokens only (0 at each sample's first token), so left padding does not
    shift positions. Padding and each sample's first token carry label -100; padding has attention mask 0.
    """
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    lengths = _lengths(samples)
    width = max(lengths)
    if pad_to_multiple_of:
        width = math.ceil(width / pad_to_multiple_of) * pad_to_multiple_of
    input_ids = torch.full((len(samples), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(samples), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), width), dtype=torch.long)
    for row, (sample, n) in enumerate(zip(samples, lengths, strict=True)):
        span = slice(0, n) if padding_side == "right" else slice(width - n, width)
        input_ids[row, span] = torch.tensor(sample["input_ids"], dtype=torch.long)
        labels[row, span] = torch.tensor(sample["labels"], dtype=torch.long)
        labels[row, span.start] = IGNORE_INDEX
        attention_mask[row, span] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "position_ids": position_ids,
        **_extra_fields(samples),
    }


def packed_collate(samples: Sequence[Sample]) -> dict[str, Any]:
    """Concatenate samples into one row [1, sum of lengths] for attention that isolates samples.

    Returns ``input_ids``, ``labels`` (first label of each sample -100), ``position_ids``
    (restarting at 0 per sample), ``cu_seqlens`` (int32 [n + 1], sample boundaries) and
    ``max_seqlen`` (int). There is no ``attention_mask``: ``rpbench.models.forward.model_inputs``
    builds what the attention backend needs from ``cu_seqlens``.
    """
    lengths = _lengths(samples)
    input_ids = torch.tensor([t for sample in samples for t in sample["input_ids"]], dtype=torch.long)
    labels = torch.tensor([t for sample in samples for t in sample["labels"]], dtype=torch.long)
    cu_seqlens = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    labels[cu_seqlens[:-1].long()] = IGNORE_INDEX
    position_ids = torch.cat([torch.arange(n) for n in lengths])
    return {
        "input_ids": input_ids[None],
        "labels": labels[None],
        "position_ids": position_ids[None],
        "cu_seqlens": cu_seqlens,
        "max_seqlen": max(lengths),
        **_extra_fields(samples),
    }


def unpad(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A padded batch as a packed one, on its device: the rows' real tokens back to back in row order.

    The same samples, labels and position ids without padding (per-sequence results keep the row order);
    other keys travel unchanged. Every row needs at least one real token.
    """
    mask = batch["attention_mask"].bool()
    lengths = mask.sum(-1)
    if not bool((lengths > 0).all()):
        raise ValueError("unpad: every row needs at least one real token (attention_mask all zero in a row)")
    cu_seqlens = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=mask.device)
    cu_seqlens[1:] = lengths.cumsum(0)
    packed = {key: batch[key][mask][None] for key in ("input_ids", "labels", "position_ids")}
    rest = {key: value for key, value in batch.items() if key not in (*packed, "attention_mask")}
    return {**rest, **packed, "cu_seqlens": cu_seqlens, "max_seqlen": int(lengths.max())}


def pack_into_budget(lengths: Sequence[int], max_tokens_per_batch: int, seed: int | None = None) -> list[list[int]]:
    """Group sample indices into batches whose lengths sum to at most ``max_tokens_per_batch``.

    Best-fit decreasing: longest sample first, each into the fullest batch that still has room.
    Deterministic; with ``seed``, equally long samples are tie-broken at random and the batch order
    is shuffled. Indices inside a batch are ascending. A sample longer than the budget is an error.
    """
    if max_tokens_per_batch <= 0:
        raise ValueError(f"max_tokens_per_batch must be positive, got {max_tokens_per_batch}")
    for index, n in enumerate(lengths):
        if not 0 < n <= max_tokens_per_batch:
            raise ValueError(
                f"sample {index} has {n} tokens; every sample needs 1 to "
                f"max_tokens_per_batch={max_tokens_per_batch} tokens (truncate it or raise the budget)"
            )
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    if seed is not None:
        rng.shuffle(order)
    order.sort(key=lambda index: -lengths[index])  # stable: ties keep the (shuffled) order
    batches: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (free tokens, batch number), sorted
    for index in order:
        slot = bisect.bisect_left(room, (lengths[index], -1))
        if slot == len(room):
            batches.append([index])
            free, number = max_tokens_per_batch, len(batches) - 1
        else:
            free, number = room.pop(slot)
            batches[number].append(index)
        if free - lengths[index] > 0:
            bisect.insort(room, (free - lengths[index], number))
    if seed is not None:
        rng.shuffle(batches)
    return [sorted(batch) for batch in batches]
