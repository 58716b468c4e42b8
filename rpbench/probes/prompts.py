"""Test records -> the padded prompt batches a probe forwards.

A prompt is rendered with the chat template and its history cut to ``data.max_prompt_length``, as for
generation. Its last token is the probed position: without the generation header
(``generation_header=False``) that is the end of the last turn, the token the authors' ``interpret.py``
reads (it renders the question with no generation prompt and takes the last token); with it, the end
of the assistant header, where generation starts. Each record is counted under the dimensions of its
``meta["dimensions"]`` (RoleMRC: the paper's five, ``knowledge_boundary.within`` -> ``knowledge_boundary``),
or its task label when it has none.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from rpbench.core.errors import DataFormatError
from rpbench.data.chat import ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.data.records import EvalExample
from rpbench.scoring.judge.rolemrc_rubrics import dimensions_of

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids")


def record_dimensions(example: EvalExample) -> list[str]:
    """The evaluation dimensions a record is counted under: those of meta["dimensions"], else [task]."""
    dims = example.meta.get("dimensions")
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return [example.task]
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, str) and d for d in dims):
        raise DataFormatError(
            example.meta.get("path", "test records"),
            example.id,
            "meta.dimensions",
            f"a list of dimension names, got {dims!r}",
        )
    return dimensions_of(dims)


@dataclass
class PromptBatches:
    """Lazily rendered batches and, per batch, each record's dimensions (for collect_frequencies)."""

    batches: Iterator[dict[str, torch.Tensor]]
    dims: list[list[list[str]]]
    n_records: int


def prompt_batches(
    examples: Sequence[EvalExample],
    tokenizer,
    renderer: ChatRenderer,
    max_prompt_length: int,
    batch_size: int,
    generation_header: bool,
) -> PromptBatches:
    """Batches of rendered prompts (with or without the generation header), padded on the tokenizer's
    padding side.

    Probes see text only: a record with an image is an error (``data.images=drop`` reads the records
    without their images, counted in the run's records).
    """
    if batch_size < 1:
        raise ValueError(f"probe.batch_size: expected a positive integer, got {batch_size}")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token; probes pad batches of prompts")
    with_image = [e.id for e in examples if any(t.image for t in e.prompt)]
    if with_image:
        raise ValueError(
            f"{len(with_image)} test records have images (first: {with_image[:3]}); probes render "
            "text only: set data.images=drop to probe them without their images"
        )
    side = getattr(tokenizer, "padding_side", "left")
    groups = [list(examples[i : i + batch_size]) for i in range(0, len(examples), batch_size)]

    def batches() -> Iterator[dict[str, torch.Tensor]]:
        for group in groups:
            samples = []
            for example in group:
                ids = renderer.render_prompt(example.prompt, max_prompt_length, generation_header)
                samples.append({"input_ids": ids, "labels": ids})
            batch = pad_collate(samples, tokenizer.pad_token_id, padding_side=side)
            yield {key: batch[key] for key in FORWARD_KEYS}

    dims = [[record_dimensions(e) for e in group] for group in groups]
    return PromptBatches(batches(), dims, len(examples))
