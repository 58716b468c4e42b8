"""Shift severity: RJSD per input field between ID and a shifted split, and the output-marginal terms.

Fields of an RPGBench sample (``rpbench.data.rpgbench.read_test``, ``meta["x"]``): the user persona, the
agent character (``str()`` of the record's object, as the authors insert it) and the dialogue context
("User Query k: ...\nAgent Response k: ..." blocks, ``remid_prompts.format_dialogue``), each embedded
separately. The output terms compare model responses with golden responses on the same split: δ_P on
ID, δ_Q on the shifted split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rpbench.data.records import EvalExample
from rpbench.eval.generalization.embed import TextEmbedder
from rpbench.eval.generalization.rjsd import Weighting, representation_jsd

INPUT_FIELDS = ("user", "character", "dialogue")


def input_field_texts(examples: Sequence[EvalExample]) -> dict[str, list[str]]:
    """{"user", "character", "dialogue"} -> one text per example (RPGBench test records)."""
    for e in examples:
        if "x" not in e.meta:
            raise ValueError(f"example {e.id!r}: meta lacks 'x'; expected an RPGBench test record")
    return {
        "user": [e.meta["x"]["user_persona"] for e in examples],
        "character": [e.meta["x"]["agent_character"] for e in examples],
        "dialogue": [e.meta["x"]["str_dialogue_context"] for e in examples],
    }


@dataclass(frozen=True)
class SplitEmbeddings:
    """Embeddings [n, d] of one split's fields, model responses and golden responses (same sample order)."""

    user: torch.Tensor
    character: torch.Tensor
    dialogue: torch.Tensor
    model_response: torch.Tensor
    golden_response: torch.Tensor
    n_truncated: int = 0  # texts cut at the encoder's max_length when the whole split was embedded

    def __post_init__(self):
        sizes = {name: len(getattr(self, name)) for name in (*INPUT_FIELDS, "model_response", "golden_response")}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"split embeddings must have one row per sample in every field, got {sizes}")

    def __len__(self) -> int:
        return len(self.user)

    def subset(self, index: Sequence[int]) -> SplitEmbeddings:
        rows = torch.as_tensor(list(index), dtype=torch.long)
        return SplitEmbeddings(
            *(getattr(self, name)[rows] for name in (*INPUT_FIELDS, "model_response", "golden_response")),
            n_truncated=self.n_truncated,
        )


def embed_split(
    embedder: TextEmbedder, examples: Sequence[EvalExample], model_responses: Sequence[str]
) -> SplitEmbeddings:
    if len(model_responses) != len(examples):
        raise ValueError(f"{len(model_responses)} model responses for {len(examples)} examples")
    texts = {
        **input_field_texts(examples),
        "model_response": list(model_responses),
        "golden_response": [e.reference for e in examples],
    }
    embedded = {name: embedder.embed(values, name=name) for name, values in texts.items()}
    return SplitEmbeddings(
        **{name: e.vectors for name, e in embedded.items()},
        n_truncated=sum(e.n_truncated for e in embedded.values()),
    )


@dataclass(frozen=True)
class ShiftSeverity:
    """RJSD of each input field (ID vs shifted) and of model vs golden responses on each split."""

    user: float
    character: float
    dialogue: float
    delta_p: float  # RJSD(model responses, golden responses) on ID
    delta_q: float  # the same on the shifted split
    n_id: int
    n_ood: int
    weighting: str

    def input_terms(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in INPUT_FIELDS}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def shift_severity(id_split: SplitEmbeddings, ood_split: SplitEmbeddings, weighting: Weighting) -> ShiftSeverity:
    return ShiftSeverity(
        **{
            name: representation_jsd(getattr(id_split, name), getattr(ood_split, name), weighting)
            for name in INPUT_FIELDS
        },
        delta_p=representation_jsd(id_split.model_response, id_split.golden_response, weighting),
        delta_q=representation_jsd(ood_split.model_response, ood_split.golden_response, weighting),
        n_id=len(id_split),
        n_ood=len(ood_split),
        weighting=weighting,
    )
