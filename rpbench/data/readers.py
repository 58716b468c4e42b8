"""One entry point over the benchmark readers, and the file/record plumbing they share.

``read(format, split, path, options, policy)`` dispatches to the ``DataFormat`` registered in
``FORMATS`` under ``format`` (each format module registers its own; ``rpbench.data`` imports them):
split ``train``, ``pairs``, ``labelled`` (KTO's labelled completions) or ``test`` -> that format's reader for
the split. ``options`` are the format's own settings (its ``options`` class: the keys only its data configs
have, typed and checked with the ``data`` group).

Files are JSON Lines (one object per line, blank lines ignored) or one JSON document, in UTF-8 with or
without a byte-order mark; a file whose first non-blank character is ``[`` is read as a JSON list,
anything else as JSON Lines. Records are
named in errors by 1-based line number (JSON Lines) or by 0-based index and id (JSON lists).

Every string of a record (keys included) must be valid Unicode: a lone UTF-16 surrogate such as
``"\\ud800"`` is a record error. A record without an id is identified by its content (``content_id``),
so its id, and the train/validation split, survive renaming the file or adding lines. Two such records of
identical content are duplicates, handled as the ``ReadPolicy``'s ``duplicates`` says (``DUPLICATE_POLICIES``:
``drop`` the repeats, ``keep`` them under the ids ``<id>#2``, ``#3``..., or ``error``; a direct call's policy,
``STRICT``, and every test split are strict: ``error``). A repeated id a record names itself is always an error (under
``on_error=skip`` the repeat is skipped and counted).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.core.registry import Registry
from rpbench.core.typed import Settings
from rpbench.data.errors import OnError, ReadResult
from rpbench.data.records import Turn
from rpbench.data.supervision import SPEAKER_KEY, TurnField

T = TypeVar("T")

SPLITS: tuple[str, ...] = ("train", "pairs", "labelled", "test")
ON_ERROR_CHOICES: tuple[str, ...] = ("raise", "skip")
LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
CONTENT_ID_CHARS = 16
DUPLICATES = "duplicates"  # the read report's count of records repeating an earlier record's id
DUPLICATES_DROPPED = "duplicates_dropped"  # of those, identical records without an id dropped (duplicates=drop)
DUPLICATE_POLICIES: tuple[str, ...] = ("drop", "keep", "error")
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which some editors write first


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR_CHOICES)}, got {on_error!r}")


@dataclass(frozen=True, kw_only=True)
class FormatOptions(Settings):
    """The keys of a format's data configs that no other format has (``data.task_dimensions``, ``data.image_root``...):
    each format subclasses it with its own fields, parsed with the ``data`` group (``rpbench.data.settings``)."""

    def image_folder(self) -> Path | None:
        """The folder the records' image paths start from on this machine (None: images are not read here)."""
        return None


@dataclass(frozen=True, kw_only=True)
class NoRubrics(FormatOptions):
    """The options of a format whose test records carry no judge rubrics: ``task_dimensions`` is null (the key
    its data configs share with the RoleMRC layout's, which names each test label's rubrics there)."""

    task_dimensions: None


@dataclass(frozen=True)
class ReadPolicy:
    """How a file is read besides its format's options: a bad record stops the read or is skipped
    (``on_error``), identical records without an id are dropped, kept or refused (``duplicates``), the
    assistant turns a training conversation trains on (``turn_field``: ``data.supervise``'s per-turn field,
    None: all) and the prompt templates' wording (``prompts_source``: None, rpbench's)."""

    on_error: OnError
    duplicates: str
    turn_field: TurnField | None
    prompts_source: str | None

    def __post_init__(self) -> None:
        check_on_error(self.on_error)
        if self.duplicates not in DUPLICATE_POLICIES:
            raise ConfigError(f"data.duplicates: one of {', '.join(DUPLICATE_POLICIES)}, got {self.duplicates!r}")


Reader = Callable[[str | Path, FormatOptions, ReadPolicy], ReadResult]


@dataclass(frozen=True)
class DataFormat:
    """A benchmark's readers, one per split it offers (None: no such split), and the settings class of the
    keys only its data configs have (``options``).

    A reader is ``fn(path, options, policy) -> ReadResult``: ``options`` an instance of ``options``,
    ``policy`` a ``ReadPolicy``.
    """

    options: type[FormatOptions]
    train: Reader | None = None
    pairs: Reader | None = None
    test: Reader | None = None
    labelled: Reader | None = None


FORMATS = Registry("data format")


# A direct call's policy: a bad record raises, a duplicate is an error, every assistant turn trained on,
# rpbench's prompt wording (a run reads as its data config says: DataSettings.policy).
STRICT = ReadPolicy(on_error="raise", duplicates="error", turn_field=None, prompts_source=None)


def read(format: str, split: str, path: str | Path, options: FormatOptions, policy: ReadPolicy = STRICT) -> ReadResult:
    """Read ``path`` as ``split`` of benchmark ``format`` with its ``options`` (the format's options class)."""
    data_format = FORMATS.get(format)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    reader = getattr(data_format, split)
    if reader is None:
        offered = [s for s in SPLITS if getattr(data_format, s) is not None]
        raise ValueError(f"format {format!r} has no {split!r} split; choose one of {', '.join(offered)}")
    if not isinstance(options, data_format.options):
        raise TypeError(f"format {format!r} reads with {data_format.options.__name__}, got {type(options).__name__}")
    return reader(path, options, policy)


# -- records and their sources ------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where a record came from: names it in errors.

    ``record`` is a 1-based line number (JSON Lines) or a position such as ``3`` or ``IDTest[3]``
    (JSON documents); positions are completed with the record's own id once it is known.
    """

    path: str
    record: int | str
    positional: bool = False

    def error(self, field: str, problem: str) -> DataFormatError:
        return DataFormatError(self.path, self.record, field, problem)

    def named(self, record_id: str) -> Source:
        return replace(self, record=f"{self.record} (id {record_id!r})") if self.positional else self


def existing_file(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        raise FileNotFoundError(f"data file expected, got a folder: {p} (this format reads one file)")
    if not p.is_file():
        resolved = "" if p.is_absolute() else f" (resolved: {p.resolve()})"
        raise FileNotFoundError(f"data file not found: {p}{resolved}")
    return p


def load_document(path: Path) -> Any:
    """A whole file as one JSON value; a file that is not valid JSON fails as a whole."""
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DataFormatError(path, "file", "<document>", f"valid UTF-8 JSON ({_why(exc)})") from None


def iter_records(path: Path) -> Iterator[tuple[Source, Any]]:
    """(source, raw record) for each record of a JSON Lines file (streamed) or a JSON list.

    An invalid JSON line or invalid text (``checked_text``) is yielded as a DataFormatError in place
    of the record, so the caller can skip it under ``on_error=skip``.
    """
    if _first_byte(path) == b"[":
        for index, raw in enumerate(load_document(path)):
            source = Source(str(path), index, positional=True)
            yield source, checked_text(raw, source)
        return
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            line = line.removeprefix(BOM) if number == 1 else line
            if not line.strip():
                continue
            source = Source(str(path), number)
            try:
                raw = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                yield source, source.error("<line>", f"one valid UTF-8 JSON object per line ({_why(exc)})")
                continue
            yield source, checked_text(raw, source)


def _why(error: Exception) -> str:
    return "nested too deeply to parse" if isinstance(error, RecursionError) else str(error)


def checked_text(raw: Any, source: Source) -> Any:
    """``raw``, or a DataFormatError naming its first string (value or key) that is not valid Unicode.

    JSON's ``\\uXXXX`` escapes can spell a lone UTF-16 surrogate, which Python accepts but cannot
    encode; caught here, it would otherwise fail far downstream without naming the record.
    """
    try:
        json.dumps(raw, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return source.error(_surrogate_at(raw, "") or "<record>", "valid Unicode text, got a lone UTF-16 surrogate")
    return raw


def _surrogate_at(value: Any, where: str) -> str | None:
    """The field path of a string under ``value`` holding a lone surrogate (such a key shown escaped)."""
    if isinstance(value, str):
        return where if LONE_SURROGATE.search(value) else None
    if isinstance(value, list):
        items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{where}.{key}" if where else key, item) for key, item in value.items()]
        if bad := next((key for key in value if LONE_SURROGATE.search(key)), None):
            return f"{where}.{bad!a}" if where else ascii(bad)
    else:
        return None
    return next((found for name, item in items if (found := _surrogate_at(item, name))), None)


def _first_byte(path: Path) -> bytes:
    """The first non-whitespace byte of a file after any byte-order mark (empty for a blank file)."""
    with path.open("rb") as f:
        if f.read(len(BOM)) != BOM:
            f.seek(0)
        while chunk := f.read(4096):
            if stripped := chunk.lstrip():
                return stripped[:1]
    return b""


def collect(
    path: Path,
    records: Iterator[tuple[Source, Any]],
    parse: Callable[[Any, Source], T],
    on_error: OnError,
    duplicates: str = "error",
) -> ReadResult[T]:
    """Parse every record; a bad record raises or, under ``on_error=skip``, is listed in ``skipped`` (a
    repeated id is also counted as ``duplicates``).

    A file without records is an error. Record ids must be unique within a file (later stages key
    predictions and judgements by id); a record without an id repeats another when their contents are
    identical: a duplicate, dropped (counted as ``duplicates_dropped`` too), kept under a numbered id, or
    an error, as ``duplicates`` says.
    """
    result: ReadResult[T] = ReadResult(str(path), counts={DUPLICATES: 0})
    if duplicates == "drop":
        result.counts[DUPLICATES_DROPPED] = 0
    seen: dict[str, int | str] = {}
    n_records = 0
    for source, raw in records:
        n_records += 1
        try:
            if isinstance(raw, DataFormatError):
                raise raw
            example = parse(raw, source)
            if example.id in seen:
                result.counts[DUPLICATES] += 1
                if isinstance(example.id, ContentId) and duplicates != "error":
                    if duplicates == "drop":
                        result.counts[DUPLICATES_DROPPED] += 1
                        continue
                    example = replace(example, id=_numbered(example.id, seen))
                    seen[example.id] = source.record
                    result.examples.append(example)
                    continue
                raise source.error(
                    "id",
                    f"a unique record id; {example.id!r} is also record {seen[example.id]} "
                    + (
                        "(records without an id are identified by their content: identical records repeat one id; "
                        "in a training file data.duplicates=drop or keep takes them; an evaluation file refuses them)"
                        if isinstance(example.id, ContentId)
                        else "(the records' own ids: give each record an id of its own, or remove the repeated one; "
                        "data.duplicates applies to records without an id only)"
                    ),
                )
            seen[example.id] = source.record
            result.examples.append(example)
        except DataFormatError as error:
            result.add_error(error, on_error)
    if n_records == 0:
        raise DataFormatError(path, "file", "<document>", "at least one record (found none)")
    return result


def _numbered(record_id: str, seen: Mapping[str, Any]) -> str:
    """The first ``<id>#<n>`` (n >= 2) not yet taken: a kept duplicate's id."""
    n = 2
    while f"{record_id}#{n}" in seen:
        n += 1
    return f"{record_id}#{n}"


def read_file(
    path: str | Path, parse: Callable[[Any, Source], T], on_error: OnError, duplicates: str = "error"
) -> ReadResult[T]:
    """Read a JSON Lines file or JSON list with ``parse`` applied to each record (``duplicates``: see
    ``collect``)."""
    check_on_error(on_error)
    p = existing_file(path)
    return collect(p, iter_records(p), parse, on_error, duplicates)


# -- field checks -------------------------------------------------------------------------------------


def as_object(raw: Any, source: Source, field: str = "<record>") -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise source.error(field, f"a JSON object, got {type_name(raw)}")
    return raw


def require(record: Mapping[str, Any], key: str, source: Source, field: str | None = None) -> Any:
    if key not in record:
        raise source.error(field or key, "required, but the record has no such field")
    return record[key]


def require_str(
    record: Mapping[str, Any], key: str, source: Source, field: str | None = None, *, allow_empty: bool = False
) -> str:
    value = require(record, key, source, field)
    if not isinstance(value, str):
        raise source.error(field or key, f"a string, got {type_name(value)}")
    if not allow_empty and not value.strip():
        raise source.error(field or key, "a non-empty string")
    return value


def require_list(record: Mapping[str, Any], key: str, source: Source, field: str | None = None) -> list[Any]:
    value = require(record, key, source, field)
    if not isinstance(value, list):
        raise source.error(field or key, f"a list, got {type_name(value)}")
    if not value:
        raise source.error(field or key, "a non-empty list")
    return value


def optional_str(record: Mapping[str, Any], key: str, source: Source, *, allow_empty: bool = False) -> str | None:
    """The string under ``key``, or None when the key is absent or null."""
    if record.get(key) is None:
        return None
    return require_str(record, key, source, allow_empty=allow_empty)


def record_id(record: Mapping[str, Any], key: str, source: Source) -> tuple[str, Source]:
    """The record's own id under ``key`` if it has one, else its ``content_id``; plus a source naming it."""
    if key not in record:
        return content_id(record), source
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise source.error(key, f"a non-empty string or integer id, got {value!r}")
    return str(value), source.named(str(value))


class ContentId(str):
    """The id of a record that names none: its ``content_id``. Two records sharing one are duplicates."""


def content_id(record: Mapping[str, Any]) -> ContentId:
    """A stable id from a record's content: a hash of its canonical JSON (key order and spacing do not
    count), the same wherever the record sits and whatever the file is called."""
    canonical = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return ContentId(hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:CONTENT_ID_CHARS])


def type_name(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


# -- conversations -------------------------------------------------------------------------------------


def parse_conversation(
    items: Sequence[Any],
    source: Source,
    field: str,
    *,
    last: str,
    role_key: str,
    content_key: str,
    roles: Mapping[str, str],
    turn_field: TurnField | None = None,
) -> tuple[Turn, ...]:
    """Turns from ``[{role_key: ..., content_key: ...}, ...]``; ``roles`` maps lower-cased raw roles to ours.

    Enforced: every role is known; a system turn only comes first, and an empty one counts as none;
    every other turn has non-empty content; user and assistant turns alternate (either may open);
    there is at least one of them; the conversation ends on a ``last`` turn. A message's ``name`` (a string)
    is its turn's speaker; ``turn_field`` (``data.supervise``'s per-turn field) marks the turns trained on.
    """
    turns: list[Turn] = []
    previous: str | None = None
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        item = as_object(item, source, where)
        raw_role = require_str(item, role_key, source, f"{where}.{role_key}")
        role = roles.get(raw_role.lower())
        if role is None:
            raise source.error(f"{where}.{role_key}", f"one of {', '.join(roles)} (any case), got {raw_role!r}")
        content = require_str(item, content_key, source, f"{where}.{content_key}", allow_empty=role == "system")
        if role == "system" and i != 0:
            raise source.error(f"{where}.{role_key}", "a system turn only as the first turn")
        if role == previous:
            raise source.error(
                f"{where}.{role_key}", f"user and assistant turns alternating (turn {i - 1} is also {role})"
            )
        previous = role
        trained = turn_field.trained(item, role, source, where) if turn_field else True
        speaker = item.get(SPEAKER_KEY) if isinstance(item.get(SPEAKER_KEY), str) else None
        if role != "system" or content.strip():
            turns.append(Turn(role, content, trained=trained, speaker=speaker))
    if not any(t.role != "system" for t in turns):
        raise source.error(field, "a conversation with at least one user or assistant turn")
    if turns[-1].role != last:
        article = "an" if last == "assistant" else "a"
        raise source.error(field, f"a conversation ending on {article} {last} turn, got {turns[-1].role}")
    return tuple(turns)
