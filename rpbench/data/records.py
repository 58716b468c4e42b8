"""Typed records shared by every benchmark reader and every later stage.

Readers turn raw files into these; rendering turns them into token tensors. Benchmark-specific
fields live in ``meta`` so the records stay the same across RoleMRC, MMRole and RPGBench.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")


@dataclass(frozen=True)
class Turn:
    """One message. ``image`` is the image of a multimodal turn: a path inside the benchmark's image root
    (resolved, when the reader was given the root; ``files.confined_path``). ``trained``: False for an
    assistant turn a conversation keeps as context only, not trained on (OpenAI's per-message ``weight: 0``,
    ``data.supervise``, ``data.speaker``). ``speaker``: the named speaker of a multi-character conversation."""

    role: Role
    content: str
    image: str | None = None
    trained: bool = True
    speaker: str | None = None

    def as_message(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def as_messages(turns: tuple[Turn, ...] | list[Turn]) -> list[dict[str, str]]:
    return [t.as_message() for t in turns]


Supervise = Literal["all", "last"]


@dataclass(frozen=True)
class SFTExample:
    """A conversation ending on an assistant turn. ``supervise``: ``all`` assistant turns are trained on,
    or only the ``last`` (the turns before it are the prompt: MMRole's one sample per character turn)."""

    id: str
    turns: tuple[Turn, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    supervise: Supervise = "all"


@dataclass(frozen=True)
class PreferenceExample:
    """A prompt (ending on a user turn) with a chosen and a rejected assistant reply."""

    id: str
    prompt: tuple[Turn, ...]
    chosen: str
    rejected: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionPreferenceExample:
    """A prompt (ending on a user turn) continued by two whole sessions, ``chosen`` and ``rejected``: each
    opens and ends on an assistant turn, its user turns between them (context, never trained on) its own."""

    id: str
    prompt: tuple[Turn, ...]
    chosen: tuple[Turn, ...]
    rejected: tuple[Turn, ...]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LabelledExample:
    """A prompt (ending on a user turn) with one assistant reply labelled ``desirable`` or not (KTO's data)."""

    id: str
    prompt: tuple[Turn, ...]
    completion: str
    desirable: bool
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalExample:
    """A prompt (ending on a user turn) with its reference reply.

    ``task`` is the benchmark's label (RoleMRC task label, MMRole scenario, RPGBench subset tag);
    ``meta`` holds the rest (judge dimensions, image, character, shift, ...).
    """

    id: str
    prompt: tuple[Turn, ...]
    reference: str
    task: str
    meta: dict[str, Any] = field(default_factory=dict)


Example = SFTExample | PreferenceExample | SessionPreferenceExample | LabelledExample | EvalExample


THINK_TAGS = ("<think>", "</think>")
THINK_OPEN, THINK_CLOSE = f"{THINK_TAGS[0]}\n", f"\n{THINK_TAGS[1]}\n\n"


def reasoning_target(reasoning: str, response: str) -> str:
    """A reply that trains its reasoning (``data.reasoning_in_target``): a think block, then the response.

    It is what Qwen3's chat template renders for a final assistant turn with reasoning (``<think>`` and
    ``</think>`` are single tokens of Qwen3's vocabulary). Every family gets the same text: for Llama-3 the
    tags are plain text, the format of reasoning models distilled into Llama (e.g. DeepSeek-R1-Distill).
    """
    return f"{THINK_OPEN}{reasoning.strip()}{THINK_CLOSE}{response}"


def generated_reply(prediction: str) -> tuple[str, str]:
    """(the reply of a generated prediction, how it was read): ``plain``, ``stripped`` (a think block closed
    anywhere: the text after the last closing tag, stripped) or ``unclosed`` (a think block that never
    closes: no reply, "")."""
    opening, closing = THINK_TAGS
    if closing in prediction:
        return prediction.rsplit(closing, 1)[1].strip(), "stripped"
    if opening in prediction:
        return "", "unclosed"
    return prediction, "plain"


def without_reasoning(reply: str) -> str:
    """The response of a ``reasoning_target`` reply (any other reply as it is)."""
    if reply.startswith(THINK_OPEN) and THINK_CLOSE in reply:
        return reply.split(THINK_CLOSE, 1)[1]
    return reply


def image_count(example: Example) -> int:
    """How many of the example's turns carry an image."""
    turns = example.turns if isinstance(example, SFTExample) else example.prompt
    return sum(turn.image is not None for turn in turns)


def missing_image(examples: Sequence[Example]) -> tuple[str, str] | None:
    """The first (record id, image path) whose image file does not exist, or None."""
    for example in examples:
        turns = example.turns if isinstance(example, SFTExample) else example.prompt
        for turn in turns:
            if turn.image is not None and not Path(turn.image).is_file():
                return example.id, turn.image
    return None


def drop_images(examples: Sequence[Example]) -> tuple[list[Example], int]:
    """The examples with no image on any turn (``data.images=drop``), and how many images were removed."""
    out, dropped = [], 0
    for example in examples:
        dropped += image_count(example)
        if isinstance(example, SFTExample):
            out.append(replace(example, turns=tuple(replace(t, image=None) for t in example.turns)))
        else:
            out.append(replace(example, prompt=tuple(replace(t, image=None) for t in example.prompt)))
    return out, dropped


def content_hash(prompt: tuple[Turn, ...], reference: str) -> str:
    """Stable hash of a prompt and its reference, used to detect train/test overlap."""
    payload = json.dumps([[t.role, t.content.strip()] for t in prompt] + [reference.strip()], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def split_for_overlap(example: Example) -> tuple[tuple[Turn, ...], str]:
    """The (prompt, reference) pair an example is identified by for split hygiene.

    An SFT example is identified by its final assistant turn (its response: reasoning trained before it
    does not make it another record) and everything before it.
    """
    if isinstance(example, SFTExample):
        return example.turns[:-1], without_reasoning(example.turns[-1].content)
    if isinstance(example, PreferenceExample):
        return example.prompt, example.chosen
    if isinstance(example, SessionPreferenceExample):
        return (*example.prompt, *example.chosen[:-1]), example.chosen[-1].content
    if isinstance(example, LabelledExample):
        return example.prompt, example.completion
    return example.prompt, example.reference
