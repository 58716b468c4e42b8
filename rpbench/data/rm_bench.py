"""Human preference pairs of role-play replies (``data.format: rm_bench``): the test records a reward model or a judge
is scored against (``evaluator=rm_bench``).

One record is one pair: a context (the conversation before the reply), the reply people preferred (``chosen``) and
the one they did not (``rejected``), optionally the character played, its profile, a category label and whether the
character was seen in the scorer's training. The field names are the data config's (``data.rm_bench.fields``: our
name -> the file's key, null: the file has no such field), so one reader takes any layout of that shape; neither
RoleRMBench's nor RoleplayPref's released field names could be confirmed when this was written (docs/rm_bench.md).

A field's value:

- ``context``: a string (one user turn) or a list of ``{role, content}`` messages ending on a user turn (roles
  system, user, assistant in any case; a system turn only first);
- ``chosen``, ``rejected``: non-empty strings, not equal;
- ``character``, ``profile``, ``category``, ``id``: strings (an id may be an integer); with a profile, the pair's
  first turn is a system turn, ``data.rm_bench.system_prompt`` filled with ``{character}`` and ``{profile}`` (the
  context may then hold no system turn of its own);
- ``seen``: a boolean, or a string in ``seen_labels`` (seen) or ``unseen_labels`` (unseen).

A record becomes an ``EvalExample``: its prompt the (system and) context turns, its reference the chosen reply, its
task the category (``uncategorised`` without one), ``meta`` the rejected reply, the character and ``seen`` (True,
False, or None when unlabelled). Ids: the record's own, or ``readers.content_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.typed import Problem, Settings
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    NoRubrics,
    ReadPolicy,
    Source,
    as_object,
    content_id,
    parse_conversation,
    read_file,
    record_id,
    require,
    require_str,
    type_name,
)
from rpbench.data.records import EvalExample, Turn
from rpbench.data.templates import Template

FIELDS = ("id", "context", "chosen", "rejected", "character", "profile", "category", "seen")
REQUIRED = ("context", "chosen", "rejected")
UNCATEGORISED = "uncategorised"
CONTEXT_ROLES = {"system": "system", "user": "user", "assistant": "assistant"}


@dataclass(frozen=True, kw_only=True)
class RMBenchLayout(Settings):
    """``data.rm_bench``: where each field of a pair is in the file, how ``seen`` is spelt, and the system turn a
    profile is given under."""

    fields: Mapping[str, str | None]  # our field name -> the file's key (null: absent)
    seen_labels: tuple[str, ...]
    unseen_labels: tuple[str, ...]
    system_prompt: str  # slots {character} and {profile}

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        unknown = sorted(set(self.fields) - set(FIELDS))
        if unknown or set(FIELDS) - set(self.fields):
            found.append(("fields", f"exactly the keys {', '.join(FIELDS)} (each a file key or null)"))
        found += [(f"fields.{key}", "the file's key (required)") for key in REQUIRED if not self.fields.get(key)]
        if set(self.seen_labels) & set(self.unseen_labels):
            found.append(("unseen_labels", "labels that are not also seen_labels"))
        if set(Template("rm_bench_system", self.system_prompt, "rpbench").slots) != {"character", "profile"}:
            found.append(("system_prompt", "a template with the slots {character} and {profile}"))
        return found


@dataclass(frozen=True, kw_only=True)
class RMBenchOptions(NoRubrics):
    """The keys of the ``rm_bench`` format's data configs: the pairs' layout."""

    rm_bench: RMBenchLayout


def _optional_str(record: Mapping[str, Any], key: str | None, source: Source) -> str | None:
    if key is None or record.get(key) is None:
        return None
    return require_str(record, key, source)


def _seen(record: Mapping[str, Any], key: str | None, layout: RMBenchLayout, source: Source) -> bool | None:
    if key is None or record.get(key) is None:
        return None
    value = record[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in layout.seen_labels + layout.unseen_labels:
        return value in layout.seen_labels
    labels = ", ".join(map(repr, layout.seen_labels + layout.unseen_labels))
    raise source.error(key, f"a boolean or one of {labels} (data.rm_bench.seen_labels/unseen_labels), got {value!r}")


def _context(record: Mapping[str, Any], key: str, source: Source) -> tuple[Turn, ...]:
    value = require(record, key, source)
    if isinstance(value, str):
        return (Turn("user", require_str(record, key, source)),)
    if not isinstance(value, list) or not value:
        raise source.error(key, f"a string or a non-empty list of {{role, content}} messages, got {type_name(value)}")
    return parse_conversation(
        value, source, key, last="user", role_key="role", content_key="content", roles=CONTEXT_ROLES
    )


def parse_pair(raw: Any, source: Source, layout: RMBenchLayout, system: Template) -> EvalExample:
    """One pair of the file as an ``EvalExample`` (see the module docstring); a bad field is a DataFormatError
    naming it (the file's key)."""
    record = as_object(raw, source)
    fields = layout.fields
    rid, source = record_id(record, fields["id"], source) if fields["id"] else (content_id(record), source)
    turns = _context(record, fields["context"], source)
    chosen = require_str(record, fields["chosen"], source)
    rejected = require_str(record, fields["rejected"], source)
    if chosen.strip() == rejected.strip():
        raise source.error(fields["rejected"], f"a reply other than {fields['chosen']} (both are the same text)")
    character = _optional_str(record, fields["character"], source)
    profile = _optional_str(record, fields["profile"], source)
    if profile is not None:
        if turns[0].role == "system":
            raise source.error(fields["context"], f"no system turn of its own when the record has {fields['profile']}")
        turns = (Turn("system", system.render(character=character or "the character", profile=profile)), *turns)
    category = _optional_str(record, fields["category"], source) or UNCATEGORISED
    meta = {"rejected": rejected, "character": character, "seen": _seen(record, fields["seen"], layout, source)}
    return EvalExample(rid, turns, chosen, category, meta)


def read_test(path: str | Path, options: RMBenchOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    layout = options.rm_bench
    system = Template("rm_bench_system", layout.system_prompt, "data.rm_bench.system_prompt")
    return read_file(path, lambda raw, source: parse_pair(raw, source, layout, system), policy.on_error)


FORMATS.register("rm_bench")(DataFormat(RMBenchOptions, test=read_test))
