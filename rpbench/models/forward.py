"""Batch -> model inputs, and log-probs of the labelled tokens without full-vocabulary logits.

Batches come from ``rpbench.data.collate``: padded (``attention_mask`` [B, T]) or packed (one row,
``cu_seqlens``). Labels follow the Hugging Face convention: ``labels[t]`` is predicted from the
hidden state at ``t - 1``. Only those hidden states go through the output layer, in chunks, and
each chunk's logits are recomputed in backward instead of stored, so memory holds one chunk of
vocabulary-wide logits at a time rather than [B, T, V]. What the model's family does to those logits
(e.g. Gemma-2's final softcapping: ``ModelFamily.logit_transform``) is applied to each chunk, and its image
inputs (``ModelFamily.image_inputs``) are passed on. For the summed NLL of SFT on CUDA, liger-kernel's
fused linear cross-entropy replaces the chunks where it is installed (the ``gpu`` extra) and the logits are
plain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from rpbench.data.chat import IGNORE_INDEX
from rpbench.models.families import ModelFamily, family_or_base

DEFAULT_CHUNK_SIZE = 2048
LogitTransform = Callable[[torch.Tensor], torch.Tensor]


def uses_varlen_kernel(attn_implementation: str) -> bool:
    """Flash-attention backends (flash_attention_2/3/4, kernels hub ones) take cu_seqlens; transformers' own rule."""
    return "flash" in attn_implementation


def is_packed(batch: Mapping[str, Any]) -> bool:
    return "cu_seqlens" in batch


def has_images(batch: Mapping[str, Any], image_inputs: Sequence[str]) -> bool:
    """Whether the batch holds any of a model's image inputs (``ModelFamily.image_inputs``)."""
    return any(key in batch for key in image_inputs)


def block_causal_mask(cu_seqlens: torch.Tensor, total: int, device: torch.device) -> torch.Tensor:
    """[1, 1, T, T] bool, True where a query may attend: same packed sample and not in the future."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long().to(device)
    sample_of = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths, output_size=total)
    positions = torch.arange(total, device=device)
    allowed = (sample_of[:, None] == sample_of[None, :]) & (positions[:, None] >= positions[None, :])
    return allowed[None, None]


def model_inputs(
    batch: Mapping[str, Any],
    attn_implementation: str,
    dtype: torch.dtype = torch.float32,
    image_inputs: Sequence[str] = (),
) -> dict[str, Any]:
    """Keyword arguments for the model (or its backbone) for a padded or packed batch.

    Padded: the 2D attention mask and position ids. Packed with a flash-attention backend
    (``flash_attention_2``/``3``/kernels): position ids plus ``cu_seq_lens_q/k`` and
    ``max_length_q/k`` for the varlen kernel, and no mask. Packed with ``sdpa``: a [1, 1, T, T] bool
    block-diagonal causal mask (True = attend); with ``eager``: the same as an additive mask in
    ``dtype`` (0 or the dtype's minimum). The mask is explicit because position ids alone isolate
    packed samples on those backends only when transformers infers packing from them, which it
    skips whenever a KV cache exists (``use_cache`` defaults to true); ``use_cache`` is off here.

    A padded batch with images also passes the image inputs (``image_inputs``: the model family's) and no
    position ids: the model computes its multimodal (3-D) positions from the attention mask and the images.
    """
    inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], "use_cache": False}
    if has_images(batch, image_inputs):
        if is_packed(batch):
            raise ValueError("packed batches cannot hold images: set objective.packing=false")
        del inputs["position_ids"]
        inputs.update({key: batch[key] for key in image_inputs})
    if not is_packed(batch):
        inputs["attention_mask"] = batch["attention_mask"]
        return inputs
    device, total = batch["input_ids"].device, batch["input_ids"].shape[-1]
    if uses_varlen_kernel(attn_implementation):
        cu_seqlens = batch["cu_seqlens"].to(device=device, dtype=torch.int32)
        max_seqlen = int(batch["max_seqlen"])
        inputs.update(
            cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens, max_length_q=max_seqlen, max_length_k=max_seqlen
        )
    elif attn_implementation == "sdpa":
        inputs["attention_mask"] = block_causal_mask(batch["cu_seqlens"], total, device)
    elif attn_implementation == "eager":
        allowed = block_causal_mask(batch["cu_seqlens"], total, device)
        inputs["attention_mask"] = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )
    else:
        raise ValueError(
            f"packed batches need attn_implementation flash_attention_2 (or another flash "
            f"backend), sdpa or eager; got {attn_implementation!r}. Use padded batches instead."
        )
    return inputs


@dataclass
class LabelledLogps:
    """Log-probs of the labelled tokens of a batch, in row-major order.

    ``sequence_index[i]`` is the sequence token ``i`` belongs to: the row of a padded batch, the
    sample of a packed one (in collation order either way).
    """

    token_logps: torch.Tensor  # [n_tokens] float32
    sequence_index: torch.Tensor  # [n_tokens] long
    n_sequences: int
    n_tokens: int


def _causal_lm(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (its LoRA layers stay in place), else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _token_logps(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, transform: LogitTransform | None
) -> torch.Tensor:
    logits = head(hidden).float()
    if transform is not None:
        logits = transform(logits)
    return logits.gather(-1, targets[:, None]).squeeze(-1) - logits.logsumexp(-1)


def _sequence_index(batch: Mapping[str, Any], selected: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sequence of each selected target position ([B, T-1] mask over ``labels[:, 1:]``), and the count."""
    rows, positions = selected.nonzero(as_tuple=True)
    if not is_packed(batch):
        return rows, selected.shape[0]
    cu_seqlens = batch["cu_seqlens"].to(selected.device)
    index = torch.searchsorted(cu_seqlens[1:].contiguous(), (positions + 1).to(cu_seqlens.dtype), right=True)
    return index.long(), len(cu_seqlens) - 1


def labelled_hidden(
    causal_lm: nn.Module, batch: Mapping[str, Any], family: type[ModelFamily]
) -> tuple[torch.Tensor, ...]:
    """The backbone's last hidden states that predict a label [n, d], those labels [n], and the [B, T-1] mask."""
    attn = causal_lm.config._attn_implementation
    inputs = model_inputs(batch, attn, dtype=causal_lm.dtype, image_inputs=family.image_inputs)
    hidden = causal_lm.base_model(**inputs).last_hidden_state
    targets = batch["labels"][:, 1:].to(hidden.device)
    selected = targets != IGNORE_INDEX
    return hidden[:, :-1][selected], targets[selected], selected


def labelled_logps(model: nn.Module, batch: Mapping[str, Any], chunk_size: int = DEFAULT_CHUNK_SIZE) -> LabelledLogps:
    """Log-probs (fp32) of every labelled token: backbone, then the output layer on labelled positions only.

    Works for transformers causal LMs of a registered family, peft-wrapped or not. The
    output layer runs on at most ``chunk_size`` positions at a time; under autograd each chunk is
    recomputed in backward. A batch without labels still runs the output layer (on nothing), so
    every parameter gets a (zero) gradient and distributed ranks stay in step.
    """
    causal_lm = _causal_lm(model)
    family = family_or_base(causal_lm)
    transform = family.logit_transform(causal_lm.config)
    hidden, targets, selected = labelled_hidden(causal_lm, batch, family)
    head = causal_lm.get_output_embeddings()
    with_grad = torch.is_grad_enabled()
    pieces = [
        checkpoint(_token_logps, head, h, t, transform, use_reentrant=False)
        if with_grad
        else _token_logps(head, h, t, transform)
        for h, t in zip(hidden.split(chunk_size), targets.split(chunk_size), strict=True)
    ]
    sequence_index, n_sequences = _sequence_index(batch, selected)
    return LabelledLogps(torch.cat(pieces), sequence_index, n_sequences, int(targets.numel()))


def sequence_logps(
    model: nn.Module, batch: Mapping[str, Any], chunk_size: int = DEFAULT_CHUNK_SIZE
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence (collation order): sum of labelled-token log-probs [S] and labelled-token count [S]."""
    out = labelled_logps(model, batch, chunk_size)
    sums = out.token_logps.new_zeros(out.n_sequences).index_add(0, out.sequence_index, out.token_logps)
    counts = torch.bincount(out.sequence_index, minlength=out.n_sequences)
    return sums, counts


def fused_linear_cross_entropy():
    """liger-kernel's fused linear cross-entropy loss class, or None where liger-kernel is not installed."""
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        return None
    return LigerFusedLinearCrossEntropyLoss


def supervised_nll_sum(
    model: nn.Module, batch: Mapping[str, Any], chunk_size: int = DEFAULT_CHUNK_SIZE, fused: bool | None = None
) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the labelled tokens, and their count (divide globally).

    ``fused`` (None: wherever possible) computes it with liger's fused linear cross-entropy, which never
    holds a chunk of logits either; possible on CUDA, with liger-kernel installed and a plain linear head whose
    logits the family leaves as they are (a batch without labels takes the chunked path, which still gives every
    parameter a zero gradient).
    """
    causal_lm = _causal_lm(model)
    family = family_or_base(causal_lm)
    head = causal_lm.get_output_embeddings()
    loss_class = fused_linear_cross_entropy()
    plain = family.logit_transform(causal_lm.config) is None
    possible = loss_class is not None and type(head) is nn.Linear and plain and head.weight.is_cuda
    if fused and not possible:
        raise RuntimeError(
            "fused cross-entropy needs liger-kernel (the gpu extra), CUDA and a plain linear head with plain logits"
        )
    if not possible or fused is False or not bool((batch["labels"][:, 1:] != IGNORE_INDEX).any()):
        out = labelled_logps(model, batch, chunk_size)
        return -out.token_logps.sum(), out.n_tokens
    hidden, targets, _ = labelled_hidden(causal_lm, batch, family)
    # the output layer in the hidden states' dtype, as autocast would run it (bf16-mixed keeps fp32 weights)
    weight = head.weight.to(hidden.dtype)
    bias = head.bias.to(hidden.dtype) if head.bias is not None else None
    loss = loss_class(reduction="sum")(weight, hidden, targets, bias)
    return loss.float(), int(targets.numel())
