"""Your own data (``data=custom``): the record shapes TRL, LLaMA-Factory and OpenAI's chat format use, detected.

Sources: a JSON Lines file, a JSON list (``.json``/``.jsonl``, see ``readers``), a Parquet file
(``.parquet``), or a hub dataset ``hf://<name>[:<split>]`` loaded with ``datasets.load_dataset(name,
split=...)`` (split: ``train`` for the train and pairs files, ``test`` for the test file, unless given),
given ``hub_timeout_s`` seconds (the data config's) to answer.

Shapes, detected from each record (every record of a file must have the same shape and form; the read
report's ``shape`` says which was found; a record holding the columns of two shapes is an error, unless
``record_shape`` names the one to read):

- ``messages``: ``{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}`` (OpenAI) or
  ShareGPT's ``{"conversations": [{"from": "system"|"human"|"gpt", "value": str}, ...]}``. A content may
  be OpenAI's list of text parts (``[{"type": "text", "text": str}, ...]``, joined with newlines). Train:
  every assistant turn is supervised but those with OpenAI's ``"weight": 0`` (0 or 1, assistant turns
  only); test: the last (assistant) turn is the reference.
- ``prompt/completion``: strings (TRL's standard form) or message lists (conversational form). Train: the
  completion is supervised; test: it is the reference.
- ``prompt/chosen/rejected``: strings or message lists (the pairs file).
- ``prompt/completion/label``: a completion labelled desirable (``true``) or undesirable (``false``), TRL's
  unpaired preference form (the labelled file, ``data.files.labelled``: KTO's data).

Options (the data config): ``columns`` maps our field names (``DEFAULT_COLUMNS``) to the file's, e.g.
``{messages: conversations}`` (a column you map must be in every record of its shape: a record without
it is an error, as is an unknown field name); ``tags`` names the message keys and role values (``role_tag``,
``content_tag``, ``user_tag``, ``assistant_tag``, ``system_tag``; LLaMA-Factory's dataset_info.json
names), unset: detected (role/content or from/value; roles user/assistant/system or human/gpt/system,
any case); ``task_dimensions``: test label -> judge rubrics. A record's ``task`` label is optional;
a test record whose label is in ``task_dimensions`` gets those rubrics, any other none (reference
metrics only). Records without an ``id`` are identified by the content of the fields read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.core.typed import Problem, Settings, as_dict
from rpbench.data.errors import ReadResult
from rpbench.data.files import HUB_PREFIX
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    FormatOptions,
    ReadPolicy,
    Source,
    as_object,
    collect,
    content_id,
    existing_file,
    iter_records,
    optional_str,
    parse_conversation,
    record_id,
    require_list,
    require_str,
    type_name,
)
from rpbench.data.records import EvalExample, LabelledExample, PreferenceExample, SFTExample, Turn
from rpbench.data.supervision import TurnField

DEFAULT_COLUMNS = {
    "messages": None,  # None: "messages", else "conversations"
    "system": None,  # a column holding the system prompt (a system turn put first); None: none
    "prompt": "prompt",
    "completion": "completion",
    "chosen": "chosen",
    "rejected": "rejected",
    "label": "label",
    "task": "task",
    "id": "id",
}
MESSAGE_COLUMNS = ("messages", "conversations")
MESSAGE_KEYS = {"openai": ("role", "content"), "sharegpt": ("from", "value")}
ROLE_NAMES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant"}
TAG_KEYS = ("role_tag", "content_tag", "user_tag", "assistant_tag", "system_tag")
HUB_SPLITS = {"train": "train", "pairs": "train", "labelled": "train", "test": "test"}
MESSAGES, COMPLETION, PREFERENCE = "messages", "prompt/completion", "prompt/chosen/rejected"
LABELLED = "prompt/completion/label"
SHAPE_FIELDS = {
    MESSAGES: ("messages",),
    COMPLETION: ("prompt", "completion"),
    PREFERENCE: ("prompt", "chosen", "rejected"),
    LABELLED: ("prompt", "completion", "label"),
}
OPTIONAL_FIELDS = ("system", "task", "id")
WEIGHT = "weight"  # OpenAI's per-message training weight: 0 (context only) or 1


@dataclass(frozen=True, kw_only=True)
class ColumnNames(Settings):
    """``data.columns``: the file's column of each of our fields (``DEFAULT_COLUMNS``; null: ours)."""

    messages: str | None
    system: str | None
    prompt: str | None
    completion: str | None
    chosen: str | None
    rejected: str | None
    label: str | None
    task: str | None
    id: str | None

    def problems(self) -> list[Problem]:
        return [(key, "null (ours) or a column name") for key, value in as_dict(self).items() if value == ""]


@dataclass(frozen=True, kw_only=True)
class MessageTags(Settings):
    """``data.tags``: the message keys and role values, with LLaMA-Factory's names (null: detected)."""

    role_tag: str | None
    content_tag: str | None
    user_tag: str | None
    assistant_tag: str | None
    system_tag: str | None


@dataclass(frozen=True, kw_only=True)
class CustomOptions(FormatOptions):
    """The keys of ``data=custom``: how long a hub dataset may take to load, your column and message names,
    the record shape to read, and the judge rubrics of your test labels (module docstring)."""

    hub_timeout_s: float | None  # null: no bound
    columns: ColumnNames
    record_shape: str | None  # null: detected
    tags: MessageTags
    task_dimensions: Mapping[str, tuple[str, ...]] | None  # test label -> judge rubrics; null: none

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.hub_timeout_s is not None and self.hub_timeout_s <= 0:
            found.append(("hub_timeout_s", "a number of seconds > 0 (or null: no bound)"))
        if self.record_shape is not None and self.record_shape not in SHAPE_FIELDS:
            found.append(("record_shape", f"one of {', '.join(SHAPE_FIELDS)} or null (detected)"))
        return found


@dataclass
class ShapedReadResult(ReadResult):
    """A ReadResult that also reports the record shape it detected."""

    shape: str = ""

    def summary(self) -> dict[str, object]:
        return {**super().summary(), "shape": self.shape}


@dataclass(frozen=True)
class Layout:
    """The data config's column and role mapping, completed with the defaults."""

    columns: Mapping[str, str | None]
    tags: Mapping[str, str | None]
    mapped: frozenset[str]  # the fields whose column the config names
    chosen_shape: str | None  # the data config's record_shape: the one shape read (None: detected)
    turn_field: TurnField | None  # data.supervise's per-turn field (training files)

    @classmethod
    def of(cls, options: CustomOptions, turn_field: TurnField | None) -> Layout:
        given = {key: value for key, value in as_dict(options.columns).items() if value is not None}  # null: ours
        columns = {**DEFAULT_COLUMNS, **given}
        return cls(columns, as_dict(options.tags), frozenset(given), options.record_shape, turn_field)

    def messages_column(self, record: Mapping[str, Any]) -> str | None:
        if self.columns["messages"]:
            return self.columns["messages"] if self.columns["messages"] in record else None
        return next((c for c in MESSAGE_COLUMNS if c in record), None)

    def shape(self, record: Mapping[str, Any], source: Source) -> tuple[str, str]:
        """The record's shape and form (e.g. ``("messages", "messages (messages: role/content)")``); a record of
        none of the shapes is an error naming the keys it has."""
        has = {f: self.columns[f] in record for f in ("prompt", "completion", "chosen", "rejected", "label")}
        matched = {
            MESSAGES: self.messages_column(record) is not None,
            COMPLETION: has["completion"] and not has["label"],
            PREFERENCE: has["chosen"] or has["rejected"],
            LABELLED: has["completion"] and has["label"],
        }
        if self.chosen_shape is not None:
            matched = {kind: hit and kind == self.chosen_shape for kind, hit in matched.items()}
        elif sum(matched.values()) > 1:
            both = [kind for kind, hit in matched.items() if hit]
            raise source.error(
                "<record>",
                f"the columns of one record shape, got those of {' and '.join(both)} (keys {sorted(record)}): "
                "keep one shape's columns per record, or choose the one to read with data.record_shape",
            )
        if matched[PREFERENCE]:
            kind = PREFERENCE
        elif matched[LABELLED]:
            kind = LABELLED
        elif matched[COMPLETION]:
            kind = COMPLETION
        elif matched[MESSAGES]:
            column = self.messages_column(record)
            items = record[column]
            keys = self.message_keys(items) if isinstance(items, list) and items else ("?", "?")
            return MESSAGES, f"{MESSAGES} ({column}: {keys[0]}/{keys[1]})"
        else:
            messages = self.columns["messages"] or " or ".join(MESSAGE_COLUMNS)
            shapes = {
                MESSAGES: messages,
                COMPLETION: "prompt + completion",
                PREFERENCE: "prompt + chosen + rejected",
                LABELLED: "prompt + completion + label",
            }
            wanted = "; ".join(w for kind, w in shapes.items() if self.chosen_shape in (None, kind))
            what = "the record shape" if self.chosen_shape else "one of the record shapes"
            raise source.error("<record>", f"{what} ({wanted}), got keys {sorted(record)}")
        form = "conversational: message lists" if isinstance(record.get(self.columns["prompt"]), list) else "strings"
        return kind, f"{kind} ({form})"

    def roles(self) -> dict[str, str]:
        given = {self.tags[f"{role}_tag"]: role for role in ("system", "user", "assistant") if self.tags[f"{role}_tag"]}
        return {str(k).lower(): v for k, v in given.items()} if given else ROLE_NAMES

    def message_keys(self, items: list[Any]) -> tuple[str, str]:
        """(role key, content key): the tags, else detected from the first message."""
        first = items[0] if isinstance(items[0], dict) else {}
        detected = next((keys for keys in MESSAGE_KEYS.values() if keys[0] in first), MESSAGE_KEYS["openai"])
        return self.tags["role_tag"] or detected[0], self.tags["content_tag"] or detected[1]

    def check_mapped(self, record: Mapping[str, Any], kind: str, source: Source) -> None:
        """A column the config maps for this shape (or a system, task or id column) is in the record."""
        for name in (*SHAPE_FIELDS[kind], *OPTIONAL_FIELDS):
            if name in self.mapped and self.columns[name] not in record:
                column = self.columns[name]
                raise source.error(
                    column, f"required (data.columns.{name}={column} names it), but the record has no such field"
                )

    def turns(
        self, record: Mapping[str, Any], column: str, source: Source, *, last: str, weights: bool = False
    ) -> tuple[Turn, ...]:
        """The turns of a message list; ``weights``: honour OpenAI's per-message ``weight`` (else refused)."""
        items = require_list(record, column, source)
        role_key, content_key = self.message_keys(items)
        roles = self.roles()
        items = [_text_message(item, source, f"{column}[{i}]", content_key) for i, item in enumerate(items)]
        untrained = _untrained_replies(items, source, column, role_key, roles, weights)
        turns = parse_conversation(
            items,
            source,
            column,
            last=last,
            role_key=role_key,
            content_key=content_key,
            roles=roles,
            turn_field=self.turn_field,
        )
        replies = [i for i, turn in enumerate(turns) if turn.role == "assistant"]  # every one is kept
        return tuple(
            replace(turn, trained=False) if i in {replies[n] for n in untrained} else turn
            for i, turn in enumerate(turns)
        )

    def system(self, record: Mapping[str, Any], source: Source) -> tuple[Turn, ...]:
        column = self.columns["system"]
        text = optional_str(record, column, source, allow_empty=True) if column else None
        return (Turn("system", text),) if text and text.strip() else ()


def _text_message(item: Any, source: Source, where: str, content_key: str) -> Any:
    """A message whose content is OpenAI's list of content parts, with its text parts joined by newlines
    (a part of another type is an error); any other message as it is."""
    if not isinstance(item, dict) or not isinstance(item.get(content_key), list):
        return item
    texts = []
    for j, part in enumerate(item[content_key]):
        field = f"{where}.{content_key}[{j}]"
        if not isinstance(part, dict) or part.get("type") != "text":
            got = part.get("type") if isinstance(part, dict) else type_name(part)
            raise source.error(
                field, f'a text part {{"type": "text", "text": ...}} (data=custom reads text), got {got!r}'
            )
        texts.append(require_str(part, "text", source, f"{field}.text", allow_empty=True))
    return {**item, content_key: "\n".join(texts)}


def _untrained_replies(
    items: list[Any], source: Source, column: str, role_key: str, roles: Mapping[str, str], weights: bool
) -> set[int]:
    """The ordinals (among assistant messages) of those with ``"weight": 0``; a weight other than 0 or 1,
    on another role, or where weights do not apply (``weights`` False) is an error."""
    untrained, replies = set(), 0
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue  # parse_conversation names it
        is_reply = roles.get(str(item.get(role_key)).lower()) == "assistant"
        if WEIGHT in item:
            where, weight = f"{column}[{i}].{WEIGHT}", item[WEIGHT]
            if not weights:
                raise source.error(where, "no weight here (weights apply to the turns of a messages record)")
            if not is_reply or isinstance(weight, bool) or weight not in (0, 1):
                raise source.error(where, f"0 or 1 on an assistant message, got {weight!r} on {item.get(role_key)!r}")
            if weight == 0:
                untrained.add(replies)
        replies += is_reply
    return untrained


# -- sources ------------------------------------------------------------------------------------------


def iter_source(path: str | Path, split: str, hub_timeout_s: float | None) -> Iterator[tuple[Source, Any]]:
    """(source, raw record) of a JSON/JSON Lines file, a Parquet file or a hub dataset (loaded within
    ``hub_timeout_s`` seconds; None: no bound)."""
    name = str(path)
    if name.startswith(HUB_PREFIX):
        yield from _hub_rows(name, split, hub_timeout_s)
        return
    p = existing_file(path)
    if p.suffix.lower() == ".parquet":
        yield from _rows(name, _parquet_rows(p))
    else:
        yield from iter_records(p)


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as error:  # pyarrow raises several types for a damaged or foreign file
        raise DataFormatError(path, "file", "<document>", f"a readable Parquet file ({error})") from None


def _hub_rows(name: str, split: str, timeout_s: float | None) -> Iterator[tuple[Source, Any]]:
    import datasets

    dataset, _, hub_split = name.removeprefix(HUB_PREFIX).partition(":")
    hub_split = hub_split or HUB_SPLITS[split]
    try:
        rows = _within(timeout_s, lambda: datasets.load_dataset(dataset, split=hub_split))
    except Unfinished:
        raise FileNotFoundError(
            f"{name}: datasets.load_dataset({dataset!r}, split={hub_split!r}) did not finish within "
            f"data.hub_timeout_s={timeout_s:g}s (an endpoint that does not answer?); raise it for a large "
            "download, or download the dataset and pass its files"
        ) from None
    except Exception as error:  # offline, missing, gated: the same advice
        raise FileNotFoundError(
            f"{name}: could not load dataset {dataset!r} split {hub_split!r} with datasets.load_dataset "
            f"({type(error).__name__}: {error})"
        ) from error
    yield from _rows(name, rows)


class Unfinished(Exception):
    """A call that did not return in its time (``_within``)."""


def _within(timeout_s: float | None, call: Callable[[], Any]) -> Any:
    """``call()``'s result, or Unfinished when it has not returned after ``timeout_s`` seconds (it is left
    running in a daemon thread, which does not keep the process alive)."""
    if timeout_s is None:
        return call()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - re-raised in the calling thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="rpbench-hub-load", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise Unfinished(timeout_s)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _rows(name: str, rows) -> Iterator[tuple[Source, Any]]:
    """Arrow rows (Parquet, datasets): their strings are valid UTF-8 already, so no surrogate check."""
    for index, raw in enumerate(rows):
        yield Source(name, index, positional=True), raw


def _non_json_at(value: Any, where: str) -> tuple[str, str] | None:
    """(field path, type) of the first value under ``value`` that JSON cannot hold, or None."""
    if isinstance(value, dict):
        items = [(f"{where}.{key}" if where else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    elif value is None or isinstance(value, (str, int, float, bool)):
        return None
    else:
        return where, "binary data (a binary column)" if isinstance(value, bytes) else type(value).__name__
    return next((found for name, item in items if (found := _non_json_at(item, name))), None)


# -- readers ------------------------------------------------------------------------------------------


def _read(
    path: str | Path, split: str, options: CustomOptions, policy: ReadPolicy, build: Callable[..., Any]
) -> ShapedReadResult:
    """Detect the first record's shape, hold every record to it, and build each with ``build``."""
    layout = Layout.of(options, policy.turn_field)
    first: dict[str, Any] = {}

    def parse(raw: Any, source: Source):
        record = as_object(raw, source)
        kind, shape = layout.shape(record, source)
        layout.check_mapped(record, kind, source)
        if not first:
            first.update(shape=shape, record=source.record)
        elif shape != first["shape"]:
            raise source.error(
                "<record>",
                f"one record shape per file: {first['shape']} as record {first['record']}, got {shape}",
            )
        columns = {**layout.columns, "messages": layout.messages_column(record)}
        used = {c: record[c] for f, c in columns.items() if c and c in record and f != "id"}
        if foreign := _non_json_at(used, ""):  # an Arrow row's binary column, timestamp...
            raise source.error(foreign[0], f"text or JSON values, got {foreign[1]}")
        if layout.columns["id"] in record:
            rid, source = record_id(record, layout.columns["id"], source)
        else:
            rid = content_id(used)
        return build(layout, record, source, rid, kind)

    records = iter_source(path, split, options.hub_timeout_s)
    duplicates = "error" if split == "test" else policy.duplicates
    result = collect(str(path), records, parse, policy.on_error, duplicates)
    return ShapedReadResult(result.path, result.examples, result.skipped, result.counts, shape=first.get("shape", ""))


def _label(layout: Layout, record: Mapping[str, Any], source: Source) -> str | None:
    return optional_str(record, layout.columns["task"], source)


def _prompt(layout: Layout, record: Mapping[str, Any], source: Source) -> tuple[Turn, ...]:
    """A prompt column: a string (one user turn) or a message list ending on a user turn."""
    column = layout.columns["prompt"]
    value = record.get(column)
    if isinstance(value, list):
        turns = layout.turns(record, column, source, last="user")
        return turns if turns[0].role == "system" else layout.system(record, source) + turns
    return layout.system(record, source) + (Turn("user", require_str(record, column, source)),)


def _reply(layout: Layout, record: Mapping[str, Any], field: str, source: Source) -> str:
    """A reply column: a string, or a message list of one assistant turn (TRL's conversational form)."""
    column = layout.columns[field]
    value = record.get(column)
    if not isinstance(value, list):
        return require_str(record, column, source)
    turns = layout.turns(record, column, source, last="assistant")
    if len(turns) != 1:
        raise source.error(column, f"one assistant message, got {len(turns)} messages")
    return turns[0].content


def _conversation(layout: Layout, record: Mapping[str, Any], source: Source) -> tuple[Turn, ...]:
    turns = layout.turns(record, layout.messages_column(record), source, last="assistant", weights=True)
    return turns if turns[0].role == "system" else layout.system(record, source) + turns


def _wrong_split(shape: str, split: str, source: Source, wanted: str) -> DataFormatError:
    return source.error("<record>", f"{wanted} for data.files.{split}, got a {shape} record")


def read_sft(path: str | Path, options: CustomOptions, policy: ReadPolicy) -> ShapedReadResult:
    """Conversations (messages) or prompt/completion records to supervise."""

    def build(layout: Layout, record, source: Source, rid: str, shape: str) -> SFTExample:
        meta = {"task": label} if (label := _label(layout, record, source)) else {}
        if shape == MESSAGES:
            return SFTExample(rid, _conversation(layout, record, source), meta)
        if shape == COMPLETION:
            turns = _prompt(layout, record, source) + (Turn("assistant", _reply(layout, record, "completion", source)),)
            return SFTExample(rid, turns, meta)
        raise _wrong_split(shape, "train", source, "messages or prompt/completion records (pairs: data.files.pairs)")

    return _read(path, "train", options, policy, build)


def read_pairs(path: str | Path, options: CustomOptions, policy: ReadPolicy) -> ShapedReadResult:
    """prompt/chosen/rejected records."""

    def build(layout: Layout, record, source: Source, rid: str, shape: str) -> PreferenceExample:
        if shape != PREFERENCE:
            raise _wrong_split(shape, "pairs", source, "prompt/chosen/rejected records")
        prompt = _prompt(layout, record, source)
        chosen = _reply(layout, record, "chosen", source)
        rejected = _reply(layout, record, "rejected", source)
        if rejected.strip() == chosen.strip():
            raise source.error(
                layout.columns["rejected"], "a reply different from 'chosen' (an identical pair teaches nothing)"
            )
        meta = {"task": label} if (label := _label(layout, record, source)) else {}
        return PreferenceExample(rid, prompt, chosen, rejected, meta)

    return _read(path, "pairs", options, policy, build)


def read_labelled(path: str | Path, options: CustomOptions, policy: ReadPolicy) -> ShapedReadResult:
    """prompt/completion/label records: a completion labelled desirable (``true``) or undesirable (``false``)."""

    def build(layout: Layout, record, source: Source, rid: str, shape: str) -> LabelledExample:
        if shape != LABELLED:
            raise _wrong_split(shape, "labelled", source, "prompt/completion/label records")
        column = layout.columns["label"]
        label = record[column]
        if not isinstance(label, bool):
            raise source.error(column, f"true (desirable) or false (undesirable), got {label!r}")
        meta = {"task": task} if (task := _label(layout, record, source)) else {}
        return LabelledExample(
            rid, _prompt(layout, record, source), _reply(layout, record, "completion", source), label, meta
        )

    return _read(path, "labelled", options, policy, build)


def read_test(path: str | Path, options: CustomOptions, policy: ReadPolicy) -> ShapedReadResult:
    """Prompts with references: the last assistant turn of a conversation, or the completion.

    The label defaults to the file's name (one group); its rubrics come from ``task_dimensions``."""
    dimensions = options.task_dimensions or {}
    default_task = Path(str(path)).stem if not str(path).startswith(HUB_PREFIX) else str(path).rsplit("/", 1)[-1]

    def build(layout: Layout, record, source: Source, rid: str, shape: str) -> EvalExample:
        if shape == MESSAGES:
            turns = _conversation(layout, record, source)
            prompt, reference = turns[:-1], turns[-1].content
            if not any(t.role == "user" for t in prompt):
                raise source.error(layout.messages_column(record), "a user turn before the last assistant turn")
        elif shape == COMPLETION:
            prompt, reference = _prompt(layout, record, source), _reply(layout, record, "completion", source)
        else:
            raise _wrong_split(shape, "test", source, "messages or prompt/completion records")
        label = _label(layout, record, source)
        task = label or default_task
        rubrics = dimensions[task] if task in dimensions else ()  # a label without rubrics: reference metrics only
        return EvalExample(rid, prompt, reference, task, {"dimensions": list(rubrics)})

    return _read(path, "test", options, policy, build)


FORMATS.register("custom")(
    DataFormat(CustomOptions, train=read_sft, pairs=read_pairs, labelled=read_labelled, test=read_test)
)
