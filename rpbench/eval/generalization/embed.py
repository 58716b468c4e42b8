"""Texts -> unit-norm sentence embeddings from one hidden layer of a local encoder, for the RJSD terms.

The EMID code's recipe is the default (conf/evaluator/rpgbench.yaml): ``xlm-roberta-base`` (multilingual,
as the user-shift personas are in de/es/zh/ja/ko), ``hidden_states[0]`` (the embedding layer), the
masked mean without the first token (``pooling: mean_skip_first``; ``mean`` keeps every token, as
sentence-transformers pools), 512 tokens, then L2 normalisation. ``layer`` indexes ``hidden_states``
(-1: the last layer). When the encoder is not available locally, the packaged all-MiniLM-L6-v2 stands in
(English only) only if ``fallback`` is set (``evaluator.generalization.encoder_fallback``, off by default),
and ``describe`` says so; otherwise it is an error, found at startup (``encoder_problem``). Texts longer than
``max_length`` tokens are embedded from their first ``max_length`` tokens and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rpbench.scoring.metrics import fallback_model_path

PACKAGED_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
POOLINGS = ("mean_skip_first", "mean")
FALLBACK_SETTING = "evaluator.generalization.encoder_fallback"


def encoder_available(encoder: str | None) -> bool:
    """Whether ``encoder`` loads without a download: a folder, or a name in the local Hugging Face cache
    (None: the packaged encoder)."""
    if encoder is None or Path(encoder).is_dir():
        return True
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(encoder, local_files_only=True)
    except (OSError, ValueError):
        return False
    return True


def encoder_problem(encoder: str | None, fallback: bool, key: str) -> str | None:
    """What stops the run at startup when ``encoder`` is missing and the fallback was not chosen (None: fine)."""
    if fallback or encoder_available(encoder):
        return None
    return (
        f"{key}={encoder} is not available locally (a hub model: `hf download {encoder}`); or choose the packaged "
        f"{PACKAGED_ENCODER} (English only) in its place with {FALLBACK_SETTING}=true (the report then says so)"
    )


@dataclass(frozen=True)
class Embedded:
    vectors: torch.Tensor  # [n, d] float32, unit rows
    n_truncated: int  # texts longer than max_length tokens, embedded from their first max_length tokens


@dataclass
class TextEmbedder:
    model: Any
    tokenizer: Any
    encoder: str
    layer: int
    max_length: int
    pooling: str
    batch_size: int
    fallback_reason: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "encoder": self.encoder,
            "layer": self.layer,
            "max_length": self.max_length,
            "pooling": self.pooling,
            "fallback_reason": self.fallback_reason,
        }

    @torch.no_grad()
    def embed(self, texts: Sequence[str], name: str = "texts") -> Embedded:
        """Unit-norm embeddings of ``texts`` in order; an empty or non-string text is an error naming it."""
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{name}[{i}]: expected a non-empty string to embed, got {text!r}")
        if not texts:
            raise ValueError(f"{name}: nothing to embed")
        device = next(self.model.parameters()).device
        vectors, truncated = [], 0
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            full = self.tokenizer(chunk, add_special_tokens=True)["input_ids"]
            truncated += sum(len(ids) > self.max_length for ids in full)
            batch = self.tokenizer(
                chunk, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(device)
            hidden = self.model(**batch, output_hidden_states=True).hidden_states[self.layer].float()
            mask = batch["attention_mask"][..., None].float()
            if self.pooling == "mean_skip_first":
                hidden, mask = hidden[:, 1:], mask[:, 1:]
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            vectors.append(torch.nn.functional.normalize(pooled, dim=-1).cpu())
        return Embedded(torch.cat(vectors), truncated)


def load_text_embedder(
    encoder: str | None,
    layer: int,
    max_length: int,
    pooling: str,
    fallback: bool,
    device: str | None = None,
    batch_size: int = 32,
) -> TextEmbedder:
    """An embedder on ``encoder`` (a name in the local Hugging Face cache or a folder; never downloads), on the
    packaged all-MiniLM-L6-v2 when ``encoder`` is None, or when it is missing and ``fallback`` is set."""
    from transformers import AutoModel, AutoTokenizer

    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {list(POOLINGS)}, got {pooling!r}")
    # A local folder is named by its last part: no machine path reaches results.
    shown = None if encoder is None else (Path(encoder).name if Path(encoder).exists() else encoder)
    path, name, reason = (fallback_model_path(), PACKAGED_ENCODER, None) if encoder is None else (encoder, shown, None)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
    except OSError as error:
        if encoder is None or not fallback:
            raise OSError(
                f"encoder {name!r} is not available locally (a hub model: `hf download {name}`; or "
                f"{FALLBACK_SETTING}=true for the packaged {PACKAGED_ENCODER}, English only)"
            ) from error
        reason = f"{shown} is not available locally; the packaged {PACKAGED_ENCODER} (English) stands in"
        path, name = fallback_model_path(), PACKAGED_ENCODER
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
    n_layers = model.config.num_hidden_layers
    if not -(n_layers + 1) <= layer <= n_layers:
        raise ValueError(f"layer {layer} outside hidden_states of {name!r} (0..{n_layers}, or negative from the end)")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return TextEmbedder(model.eval().to(device), tokenizer, name, layer, max_length, pooling, batch_size, reason)
