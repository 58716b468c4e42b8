"""Whole-session preference pairs (``format: session_pairs``, ``data=session_pairs``): multi-turn DPO's data.

A JSON Lines file (or JSON list), one pair per record, as ``python -m rpbench.synth.pairs_from_runs`` writes it
from judged ``evaluator=conversation`` runs (or as you write it yourself):

- ``id``: the pair's name (string or integer, unique in the file);
- ``system``: the character's system prompt (may be empty: none); ``opening``: the user's first message;
- ``chosen``, ``rejected``: the two sessions after the opening, each a list of ``{"role", "content"}``
  messages (roles ``assistant`` and ``user``, alternating, opening and ending on an assistant turn);
- ``meta`` (optional): an object kept with the record (the builder's runs, scores and dimension).

Each becomes a ``SessionPreferenceExample``: the prompt (system, opening) is all the two sessions share.
``objective=dpo`` trains on every assistant turn of both sessions; the user turns are context (masked).
Errors name the file, the record and the field (``chosen[2].role``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    NoRubrics,
    ReadPolicy,
    Source,
    as_object,
    parse_conversation,
    read_file,
    record_id,
    require_list,
    require_str,
)
from rpbench.data.records import SessionPreferenceExample, Turn

FIELDS: tuple[str, ...] = ("id", "system", "opening", "chosen", "rejected", "meta")
SESSION_ROLES = {"assistant": "assistant", "user": "user"}


def parse_session(record: dict[str, Any], key: str, source: Source) -> tuple[Turn, ...]:
    items = require_list(record, key, source)
    turns = parse_conversation(
        items, source, key, last="assistant", role_key="role", content_key="content", roles=SESSION_ROLES
    )
    if turns[0].role != "assistant":
        raise source.error(f"{key}[0].role", "assistant (a session continues the opening with a reply)")
    return turns


def parse_pair(raw: Any, source: Source) -> SessionPreferenceExample:
    record = as_object(raw, source)
    if "id" not in record:
        raise source.error("id", "required (a pair names itself), but the record has none")
    rid, source = record_id(record, "id", source)
    unknown = sorted(set(record) - set(FIELDS))
    if unknown:
        raise source.error(unknown[0], f"a known field ({', '.join(FIELDS)})")
    system = require_str(record, "system", source, allow_empty=True).strip()
    opening = require_str(record, "opening", source).strip()
    meta = as_object(record.get("meta", {}), source, "meta")
    prompt = ((Turn("system", system),) if system else ()) + (Turn("user", opening),)
    chosen, rejected = parse_session(record, "chosen", source), parse_session(record, "rejected", source)
    return SessionPreferenceExample(rid, prompt, chosen, rejected, dict(meta))


def read_pairs(path: str | Path, options: NoRubrics, policy: ReadPolicy) -> ReadResult[SessionPreferenceExample]:
    return read_file(path, parse_pair, policy.on_error)


FORMATS.register("session_pairs")(DataFormat(NoRubrics, pairs=read_pairs))
