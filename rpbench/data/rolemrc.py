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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.data.errors import OnError, ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    Source,
    as_object,
    duplicate_policy,
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


def read_sft(path: str | Path, *, on_error: OnError = "raise", **options: Any) -> ReadResult[SFTExample]:
    """Conversations whose assistant turns are supervised. Options: ``duplicates``, ``turn_field`` (the
    per-turn field of ``data.supervise``); others are ignored."""

    def parse(raw: Any, source: Source) -> SFTExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        turns = _turns(record, "conversations", source, last="assistant", turn_field=options.get("turn_field"))
        return SFTExample(rid, turns, _label_meta(record, source))

    return read_file(path, parse, on_error, duplicate_policy(options))


def read_pairs(path: str | Path, *, on_error: OnError = "raise", **options: Any) -> ReadResult[PreferenceExample]:
    """Preference pairs. Options: ``duplicates``; others are ignored."""

    def parse(raw: Any, source: Source) -> PreferenceExample:
        record = as_object(raw, source)
        rid, source = record_id(record, "id", source)
        prompt = _turns(record, "prompt", source, last="user")
        chosen = require_str(record, "chosen", source)
        rejected = require_str(record, "rejected", source)
        if rejected.strip() == chosen.strip():
            raise source.error("rejected", "a reply different from 'chosen' (an identical pair teaches nothing)")
        return PreferenceExample(rid, prompt, chosen, rejected, _label_meta(record, source))

    return read_file(path, parse, on_error, duplicate_policy(options))


def read_test(path: str | Path, *, on_error: OnError = "raise", **options: Any) -> ReadResult[EvalExample]:
    """Test prompts with references; ``meta["dimensions"]`` lists the judge rubrics of the label.

    Options: ``task_dimensions``: test label -> rubric names (the data config's table); every record
    needs a listed label. Without it (files in the same layout but unlabelled, e.g. the RoleBench test
    files the RoleMRC authors scored) the label is optional, defaults to the file's stem, and records
    have no rubrics. Other options are ignored.
    """
    dimensions = _task_dimensions(options) if options.get("task_dimensions") is not None else None

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

    return read_file(path, parse, on_error)


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


def _task_dimensions(options: Mapping[str, Any]) -> dict[str, list[str]]:
    table = options.get("task_dimensions")
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(
            "rolemrc.read_test needs options['task_dimensions']: a mapping from each test label "
            "to its judge rubric names (the data config's task_dimensions table)"
        )
    out: dict[str, list[str]] = {}
    for label, dims in table.items():
        if isinstance(dims, str) or not isinstance(dims, Sequence) or not all(isinstance(d, str) for d in dims):
            raise ConfigError(f"data.task_dimensions[{label!r}] must be a list of rubric names, got {dims!r}")
        out[str(label)] = list(dims)
    return out


FORMATS.register("rolemrc")(DataFormat(train=read_sft, pairs=read_pairs, test=read_test))
