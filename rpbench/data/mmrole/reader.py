"""MMRole readers (Dai et al., ICLR 2025; github.com/YanqiDai/MMRole).

Files are JSON lists (JSON Lines accepted too) of records::

    {"id": str, "system": str, "image": "COCO/train2017/....jpg", "role": str, "script": str,
     "other_role": str, "conversations": [{"from": "user", "value": str},
                                          {"from": "assistant", "value": str, "answer": str?}, ...]}

Test files (``{comment,human-role,inter-role}_test.json``, with or without a model's ``answer``, with
or without ``rm_review``) give one EvalExample per record: the prompt is the system turn (when
non-empty) and the turns before the last; the last assistant ``value`` is the reference and its
``answer``, when present, goes to ``meta["answer"]``. Training files hold dialogues of the same shape
(possibly multi-turn; ``system``, ``role``, ``script``, ``other_role`` optional) and give SFTExamples.

The image is the record's ``image``, attached to the first user turn; or, as in the released training file
(Qwen-VL-Chat's finetuning format), written inside a user turn as ``Picture 1: <img>path</img>\\n``: it is
taken out of the text and attached to that turn (at most one per turn, only in user turns; ``image`` may
then be absent). Either way the path is checked by ``files.confined_path``.

Options (``MMRoleOptions``, the data config's keys): ``image_root`` (images are resolved relative to it and
must stay inside it; without it an image must be a relative path without ``..``; a missing image file is not
an error here, MMRole's COCO images are not shipped with it); ``default_system`` (the system prompt of records
without one, counted as ``system_filled``); ``per_turn_samples`` (training: one sample per assistant turn, the
turns up to it, only it supervised, as the MMRole paper trains (sec. 6.1); ids ``<id>#<n>`` for dialogues
of several turns, ``meta["dialogue"]`` the record id). A test file's scenario (one of SCENARIOS) is the one
its name starts with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.errors import ReadResult
from rpbench.data.files import confined_path, package_path
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    FormatOptions,
    ReadPolicy,
    Source,
    as_object,
    existing_file,
    optional_str,
    parse_conversation,
    read_file,
    record_id,
    require_list,
    require_str,
)
from rpbench.data.records import EvalExample, SFTExample, Turn
from rpbench.data.supervision import TurnField

SCENARIOS: tuple[str, ...] = ("comment", "human-role", "inter-role")
ROLES = {"user": "user", "assistant": "assistant"}
PROFILE_KEYS: tuple[str, ...] = ("role", "script", "other_role")
# Qwen-VL-Chat's inline image: "Picture <n>: <img>path</img>" and the line break after it.
INLINE_IMAGE = re.compile(r"(?:Picture \d+: ?)?<img>(.*?)</img>\n?", re.DOTALL)
SYSTEM_FILLED = "system_filled"


@dataclass(frozen=True, kw_only=True)
class MMRoleImages(FormatOptions):
    """The key of every MMRole format: the folder the records' image paths start from (null: none; an
    image is then a relative path without ``..``)."""

    image_root: str | None

    def image_folder(self) -> Path | None:
        return package_path(self.image_root) if self.image_root else None


@dataclass(frozen=True, kw_only=True)
class MMRoleOptions(MMRoleImages):
    """The keys of the ``mmrole`` format's data configs (module docstring)."""

    default_system: str | None
    per_turn_samples: bool


def read_test(path: str | Path, options: MMRoleOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    """One EvalExample per record; ``task`` is the scenario."""
    scenario = scenario_of(path)
    filled: set[str] = set()

    def parse(raw: Any, source: Source) -> EvalExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        require_str(record, "system", source, allow_empty=True)
        turns, image = dialogue(record, source, options.image_folder(), options.default_system, None, filled, rid)
        meta: dict[str, Any] = {"image": image}
        meta.update({key: require_str(record, key, source) for key in PROFILE_KEYS})
        items = record["conversations"]
        answer = as_object(items[-1], source).get("answer")
        if answer is not None:
            if not isinstance(answer, str):
                raise source.error(f"conversations[{len(items) - 1}].answer", "a string (the model's answer)")
            meta["answer"] = answer
        return EvalExample(rid, turns[:-1], turns[-1].content, scenario, meta)

    return _counted(read_file(path, parse, policy.on_error), filled)


def read_sft(path: str | Path, options: MMRoleOptions, policy: ReadPolicy) -> ReadResult[SFTExample]:
    """Training dialogues: every assistant turn supervised, or with ``per_turn_samples`` one sample per turn."""
    filled: set[str] = set()

    def parse(raw: Any, source: Source) -> SFTExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        root, system = options.image_folder(), options.default_system
        turns, image = dialogue(record, source, root, system, policy.turn_field, filled, rid)
        meta: dict[str, Any] = {"image": image}
        meta.update({key: value for key in PROFILE_KEYS if (value := optional_str(record, key, source))})
        speakers = {"assistant": meta.get("role"), "user": meta.get("other_role")}  # data.speaker reads them
        turns = tuple(replace(t, speaker=t.speaker or speakers.get(t.role)) for t in turns)
        return SFTExample(rid, turns, meta)

    result = _counted(read_file(path, parse, policy.on_error, policy.duplicates), filled)
    if options.per_turn_samples:
        result.examples = _per_turn(result.path, result.examples)
    return result


def per_turn(example: SFTExample) -> list[SFTExample]:
    """One sample per assistant turn of ``example``: the turns up to it, only it supervised."""
    ends = [i for i, turn in enumerate(example.turns) if turn.role == "assistant"]
    if len(ends) == 1:
        return [replace(example, supervise="last")]
    meta = {**example.meta, "dialogue": example.id}
    return [SFTExample(f"{example.id}#{n}", example.turns[: end + 1], meta, "last") for n, end in enumerate(ends, 1)]


def _per_turn(path: str, examples: list[SFTExample]) -> list[SFTExample]:
    samples: list[SFTExample] = []
    seen: dict[str, str] = {}
    for example in examples:
        for sample in per_turn(example):
            if sample.id in seen:
                raise DataFormatError(
                    path,
                    example.id,
                    "id",
                    f"ids that stay unique once dialogues are split per turn: sample {sample.id!r} of this record "
                    f"repeats one of record {seen[sample.id]!r}",
                )
            seen[sample.id] = example.id
            samples.append(sample)
    return samples


def _counted(result: ReadResult, filled: set[str]) -> ReadResult:
    if filled:
        result.counts[SYSTEM_FILLED] = sum(example.id in filled for example in result.examples)
    return result


def dialogue(
    record: dict[str, Any],
    source: Source,
    image_root: Path | None,
    default_system: str | None,
    turn_field: TurnField | None,
    filled: set[str],
    rid: str,
) -> tuple[tuple[Turn, ...], str]:
    """The record's turns (its system prompt first, or ``default_system`` when it has none; ``rid`` is added
    to ``filled`` then), each image attached to its user turn (inside ``image_root``; ``turn_field``: the
    assistant turns trained on); and the record's image name."""
    system = optional_str(record, "system", source, allow_empty=True) or ""
    if not system.strip() and default_system:
        system = default_system
        filled.add(rid)
    items = require_list(record, "conversations", source)
    turns = list(
        parse_conversation(
            items,
            source,
            "conversations",
            last="assistant",
            role_key="from",
            content_key="value",
            roles=ROLES,
            turn_field=turn_field,
        )
    )
    inline = _inline_images(turns, source, image_root)
    image = optional_str(record, "image", source)
    if image is None and not inline:
        raise source.error(
            "image", "required (or the image inline in a user turn as <img>path</img>), but the record has neither"
        )
    if not inline:
        first_user = next((i for i, t in enumerate(turns) if t.role == "user"), None)
        if first_user is None:
            raise source.error("conversations", "a user turn to carry the image")
        resolved = confined_path(image_root, image, file=source.path, record=source.record, field="image")
        turns[first_user] = Turn("user", turns[first_user].content, image=str(resolved))
    return tuple(([Turn("system", system)] if system.strip() else []) + turns), image or inline[0]


def _inline_images(turns: list[Turn], source: Source, image_root: str | Path | None) -> list[str]:
    """Move each ``<img>path</img>`` out of the text of ``turns`` (in place) onto its turn; the names, in order."""
    names = []
    for i, turn in enumerate(turns):
        found = INLINE_IMAGE.findall(turn.content)
        text = INLINE_IMAGE.sub("", turn.content)
        field = f"conversations[{i}].value"
        if "<img>" in text or "</img>" in text:
            raise source.error(field, "images written as <img>path</img> (an unmatched <img> or </img> is left)")
        if not found:
            continue
        if turn.role != "user":
            raise source.error(field, "images (<img>path</img>) only in user turns")
        if len(found) > 1:
            raise source.error(field, f"at most one image per turn, got {len(found)} <img> tags")
        if not found[0].strip():
            raise source.error(field, "an image path inside <img></img>, got an empty one")
        if not text.strip():
            raise source.error(field, "text besides the image")
        path = confined_path(image_root, found[0], file=source.path, record=source.record, field=field)
        turns[i] = Turn("user", text, image=str(path))
        names.append(found[0])
    return names


def scenario_of(path: str | Path) -> str:
    """The MMRole scenario a test file's name starts with."""
    name = existing_file(path).name
    for candidate in SCENARIOS:
        if name.startswith(candidate):
            return candidate
    raise DataFormatError(
        path,
        "file",
        "<file name>",
        f"a name starting with its MMRole scenario ({', '.join(SCENARIOS)}), e.g. comment_test.json; got {name!r}",
    )


FORMATS.register("mmrole")(DataFormat(MMRoleOptions, train=read_sft, test=read_test))
