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
The image is attached to the first user turn.

Options: ``image_root`` (images are resolved relative to it and must stay inside it, see
``files.confined_path``; without it an image must be a relative path without ``..``; a missing image
file is not an error here, MMRole's COCO images are not shipped with it) and, for test files,
``scenario`` (one of SCENARIOS; inferred from a file name starting with it otherwise). Other options
are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rpbench.data.errors import OnError, ReadResult
from rpbench.data.files import confined_path
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
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

SCENARIOS: tuple[str, ...] = ("comment", "human-role", "inter-role")
ROLES = {"user": "user", "assistant": "assistant"}
PROFILE_KEYS: tuple[str, ...] = ("role", "script", "other_role")


def read_test(path: str | Path, *, on_error: OnError = "raise", **options: Any) -> ReadResult[EvalExample]:
    """One EvalExample per record; ``task`` is the scenario."""
    scenario = scenario_of(path, options.get("scenario"))
    image_root = options.get("image_root")

    def parse(raw: Any, source: Source) -> EvalExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        system = require_str(record, "system", source, allow_empty=True)
        image = require_str(record, "image", source)
        meta: dict[str, Any] = {"image": image}
        meta.update({key: require_str(record, key, source) for key in PROFILE_KEYS})
        items = require_list(record, "conversations", source)
        turns = _conversation(items, source, system, image, image_root)
        answer = as_object(items[-1], source).get("answer")
        if answer is not None:
            if not isinstance(answer, str):
                raise source.error(f"conversations[{len(items) - 1}].answer", "a string (the model's answer)")
            meta["answer"] = answer
        return EvalExample(rid, turns[:-1], turns[-1].content, scenario, meta)

    return read_file(path, parse, on_error)


def read_sft(path: str | Path, *, on_error: OnError = "raise", **options: Any) -> ReadResult[SFTExample]:
    """Training dialogues; every assistant turn is supervised."""
    image_root = options.get("image_root")

    def parse(raw: Any, source: Source) -> SFTExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        system = optional_str(record, "system", source, allow_empty=True) or ""
        image = require_str(record, "image", source)
        meta: dict[str, Any] = {"image": image}
        meta.update({key: value for key in PROFILE_KEYS if (value := optional_str(record, key, source))})
        turns = _conversation(require_list(record, "conversations", source), source, system, image, image_root)
        return SFTExample(rid, turns, meta)

    return read_file(path, parse, on_error)


def _conversation(
    items: list[Any], source: Source, system: str, image: str, image_root: str | Path | None
) -> tuple[Turn, ...]:
    turns = list(
        parse_conversation(
            items, source, "conversations", last="assistant", role_key="from", content_key="value", roles=ROLES
        )
    )
    first_user = next((i for i, t in enumerate(turns) if t.role == "user"), None)
    if first_user is None:
        raise source.error("conversations", "a user turn to carry the image")
    resolved = str(confined_path(image_root or None, image, file=source.path, record=source.record, field="image"))
    turns[first_user] = Turn("user", turns[first_user].content, image=resolved)
    return tuple(([Turn("system", system)] if system.strip() else []) + turns)


def scenario_of(path: str | Path, scenario: Any) -> str:
    if scenario is not None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown MMRole scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
        return scenario
    name = existing_file(path).name
    for candidate in SCENARIOS:
        if name.startswith(candidate):
            return candidate
    raise ValueError(
        f"cannot tell the MMRole scenario from the file name {name!r}: name it "
        f"<scenario>_test.json or pass options['scenario'] (one of {', '.join(SCENARIOS)})"
    )


FORMATS.register("mmrole")(DataFormat(train=read_sft, test=read_test))
