"""RoleMRC readers (Lu et al., 2025; HF dataset ``Junrulu/RoleMRC``).

Formats, one JSON object per line (a JSON list is accepted too):

- SFT (``roleMRC_train-sft*.jsonl``): ``{"conversations": [{"role": "System"|"User"|"Assistant",
  "content": str}, ...], "task": label?}``; the conversation ends on an assistant turn.
- Pairs (``roleMRC_train-rl*.jsonl``, ``roleMRC_dev-rl.jsonl``): ``{"prompt": [turns], "chosen": str,
  "rejected": str, "task": label?}``; the prompt ends on a user turn.
- Test (``roleMRC_test.jsonl``): ``{"task": label, "question": [turns], "reference": str}``; the
  question ends on a user turn and the label must be one of ``task_dimensions``.

Roles are matched case-insensitively. Turn order rules: see ``readers.parse_conversation``. The label
is optional in training files (the ``_mix`` files add records from other datasets); free-chat labels
such as ``role_related_dialogue---user_first---no_narration---answer`` are split into ``label_parts``.
Records carry no id in the published files: ids are ``readers.content_id`` unless a record has ``id``.
A pair whose chosen and rejected replies are the same (up to surrounding whitespace) is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.typed import Problem
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    FormatOptions,
    ReadPolicy,
    Source,
    as_object,
    optional_str,
    parse_conversation,
    read_file,
    record_id,
    require_list,
    require_str,
)
from rpbench.data.records import EvalExample, PreferenceExample, SFTExample
from rpbench.data.supervision import TurnField

ROLES = {"system": "system", "user": "user", "assistant": "assistant"}
LABEL_KEY = "task"
LABEL_SEPARATOR = "---"
LABEL_PARTS = ("family", "first_speaker", "narration", "outcome")
# The released data's labels: the 18 evaluated ones (TEST_LABELS) and the free and on-scene chats' (SFT only).
BASE_MRC = [
    f"role_{rel}_mrc_{out}_{narr}_narration"
    for rel, out in (("related", "answer"), ("related", "refused"), ("unrelated", "refused"), ("unrelated", "answer"))
    for narr in ("with", "no")
]
NESTED = [
    f"role_related_mrc_answer_{narr}_narration-special-{kind}"
    for narr in ("with", "no")
    for kind in ("content", "format")
]
PRIORITY = [f"role_related_mrc_answer_{narr}_narration-refused" for narr in ("with", "no")]
MULTI_TURN = [f"role_related_mrc_refused_{narr}_narration-2ndrefused" for narr in ("with", "no")] + [
    f"role_unrelated_mrc_refused_{narr}_narration-2ndanswer" for narr in ("with", "no")
]
TEST_LABELS = BASE_MRC + NESTED + MULTI_TURN + PRIORITY
FREE_CHAT = [
    f"role_related_dialogue---{first}---{narr}_narration---answer"
    for first in ("user_first", "role_first")
    for narr in ("no", "with")
]
ON_SCENE = [
    f"role_related_mrc_dialogue---{first}---{narr}_narration---answer"
    for first in ("user_first", "role_first")
    for narr in ("no", "with")
]


@dataclass(frozen=True, kw_only=True)
class RoleMRCOptions(FormatOptions):
    """The RoleMRC layout's key: each evaluated test label -> the judge rubrics it is scored on (null: test
    records without rubrics, their label optional)."""

    task_dimensions: Mapping[str, tuple[str, ...]] | None

    def problems(self) -> list[Problem]:
        if self.task_dimensions is not None and not self.task_dimensions:
            return [("task_dimensions", "null or a table of test label -> judge rubric names")]
        return []


def read_sft(path: str | Path, options: RoleMRCOptions, policy: ReadPolicy) -> ReadResult[SFTExample]:
    """Conversations whose assistant turns are supervised (those of ``policy.turn_field``)."""

    def parse(raw: Any, source: Source) -> SFTExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        turns = _turns(record, "conversations", source, last="assistant", turn_field=policy.turn_field)
        return SFTExample(rid, turns, _label_meta(record, source))

    return read_file(path, parse, policy.on_error, policy.duplicates)


def read_pairs(path: str | Path, options: RoleMRCOptions, policy: ReadPolicy) -> ReadResult[PreferenceExample]:
    """Preference pairs."""

    def parse(raw: Any, source: Source) -> PreferenceExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        prompt = _turns(record, "prompt", source, last="user")
        chosen = require_str(record, "chosen", source)
        rejected = require_str(record, "rejected", source)
        if rejected.strip() == chosen.strip():
            raise source.error("rejected", "a reply different from 'chosen' (an identical pair teaches nothing)")
        return PreferenceExample(rid, prompt, chosen, rejected, _label_meta(record, source))

    return read_file(path, parse, policy.on_error, policy.duplicates)


def read_test(path: str | Path, options: RoleMRCOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    """Test prompts with references; ``meta["dimensions"]`` lists the judge rubrics of the label.

    With ``options.task_dimensions`` (test label -> rubric names) every record needs a listed label. Without
    it (files in the same layout but unlabelled, e.g. the RoleBench test files the RoleMRC authors scored)
    the label is optional, defaults to the file's stem, and records have no rubrics. Test records are read
    strictly: a repeated id is an error.
    """
    dimensions = options.task_dimensions

    def parse(raw: Any, source: Source) -> EvalExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        prompt = _turns(record, "question", source, last="user")
        reference = require_str(record, "reference", source)
        if dimensions is None:
            task = optional_str(record, LABEL_KEY, source) or Path(path).stem
            return EvalExample(rid, prompt, reference, task, {"dimensions": []})
        task = require_str(record, LABEL_KEY, source)
        if task not in dimensions:
            raise source.error(LABEL_KEY, f"a test label listed in task_dimensions, got {task!r}")
        return EvalExample(rid, prompt, reference, task, {"dimensions": list(dimensions[task])})

    return read_file(path, parse, policy.on_error)


def parse_label(label: str, source: Source) -> dict[str, Any]:
    """``{"task": label}``, plus ``label_parts`` for ``---``-separated free-chat labels."""
    meta: dict[str, Any] = {"task": label}
    if LABEL_SEPARATOR in label:
        parts = label.split(LABEL_SEPARATOR)
        if len(parts) != len(LABEL_PARTS) or not all(parts):
            raise source.error(
                LABEL_KEY,
                f"{len(LABEL_PARTS)} non-empty parts ({', '.join(LABEL_PARTS)}) "
                f"separated by '{LABEL_SEPARATOR}', got {label!r}",
            )
        meta["label_parts"] = dict(zip(LABEL_PARTS, parts, strict=True))
    return meta


def _label_meta(record: Mapping[str, Any], source: Source) -> dict[str, Any]:
    label = optional_str(record, LABEL_KEY, source)
    return {} if label is None else parse_label(label, source)


def _turns(record: Mapping[str, Any], key: str, source: Source, *, last: str, turn_field: TurnField | None = None):
    items = require_list(record, key, source)
    return parse_conversation(
        items, source, key, last=last, role_key="role", content_key="content", roles=ROLES, turn_field=turn_field
    )


FORMATS.register("rolemrc")(DataFormat(RoleMRCOptions, train=read_sft, pairs=read_pairs, test=read_test))
