"""CoSER's given-circumstance acting test set (Wang et al. 2025, Neph0s/CoSER ``data/test/test_set.json``).

The file is one JSON list of scenes, each with:

- ``book`` (title), ``i_c`` (the scene's index in its plot), ``plot``: an object with ``i_p`` (the plot's
  index), ``summary`` and ``key_characters`` (objects with ``name`` and optionally ``description``);
- ``scenario`` (the setting), ``topic`` (optional), ``key_characters``: objects with ``name`` and ``thought``
  (the character's state of mind; optional per character);
- ``major_characters`` and ``speaking_characters_w_env`` (lists of names; ``Environment`` is added to the
  speakers when absent, as the authors do), ``character_profiles`` (name -> profile);
- ``dialogues``: the original scene, objects with ``character`` and ``message``;
- ``tag``: ``id`` (a held-out plot of a training book: split ``test``) or ``ood`` (a book kept out of
  training: split ``ood``).

One record per scene, id ``<book>-<i_p>-<i_c>`` (the authors' key), task its split; ``data.splits`` picks
the splits read. The evaluated model plays the first major character (``meta.character``); the other
characters, the environment and the next-speaker step are other models (``evaluator=coser``). A profile is the
plot's description of the character, then ``character_profiles``' (the authors' combination).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.coser_prompts import ENVIRONMENT, START_CUE, CoserPrompts
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    FormatOptions,
    ReadPolicy,
    Source,
    as_object,
    existing_file,
    load_document,
    require,
    require_str,
)
from rpbench.data.records import EvalExample, Turn

SPLITS = {"id": "test", "ood": "ood"}  # the file's tag -> rpbench's split name
THOUGHT = re.compile(r"\[[^\]]*\]")  # a character's unspoken thought: [ ... ]


def strip_thoughts(text: str) -> str:
    """A message without its [thoughts], each line trimmed and empty lines dropped."""
    lines = (line.strip() for line in THOUGHT.sub("", text).splitlines())
    return "\n".join(line for line in lines if line)


def scene_text(lines: Sequence[tuple[str, str]]) -> str:
    """Messages as the scene's parties see them: ``<speaker>: <text>`` without thoughts, a blank line apart."""
    return "\n\n".join(f"{speaker}: {strip_thoughts(text)}" for speaker, text in lines)


@dataclass(frozen=True, kw_only=True)
class CoserOptions(FormatOptions):
    """``data.splits`` (test, ood or both) and ``data.max_rounds`` (messages a scene may have at most, every
    speaker's counted: the authors stop at 20)."""

    splits: tuple[str, ...]
    max_rounds: int
    task_dimensions: None

    def problems(self):
        found = []
        if not self.splits or any(s not in SPLITS.values() for s in self.splits):
            found.append(("splits", f"a non-empty list from {', '.join(SPLITS.values())}"))
        return found + ([] if self.max_rounds >= 2 else [("max_rounds", "an integer >= 2")])


def names(record: dict[str, Any], key: str, source: Source) -> list[str]:
    value = require(record, key, source)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise source.error(key, "a non-empty list of names")
    return list(value)


def named_objects(record: dict[str, Any], key: str, source: Source) -> list[dict[str, Any]]:
    value = require(record, key, source)
    if not isinstance(value, list):
        raise source.error(key, "a list of objects with a name")
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise source.error(f"{key}[{i}]", "an object with a string name")
    return value


def dialogue(record: dict[str, Any], source: Source) -> list[dict[str, str]]:
    value = require(record, "dialogues", source)
    if not isinstance(value, list) or not value:
        raise source.error("dialogues", "a non-empty list of {character, message}")
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("character"), str):
            raise source.error(f"dialogues[{i}].character", "a string")
        if not isinstance(turn.get("message"), str):
            raise source.error(f"dialogues[{i}].message", "a string")
    return [{"character": t["character"], "message": t["message"]} for t in value]


def scene(raw: Any, source: Source, options: CoserOptions, prompts: CoserPrompts) -> EvalExample | None:
    """The scene as an evaluation record, or None when its split is not read."""
    record = as_object(raw, source)
    tag = require_str(record, "tag", source)
    if tag not in SPLITS:
        raise source.error("tag", f"one of {', '.join(SPLITS)}, got {tag!r}")
    book, scenario = require_str(record, "book", source), require_str(record, "scenario", source)
    plot = as_object(require(record, "plot", source), source, "plot")
    i_p, i_c = require(plot, "i_p", source, "plot.i_p"), require(record, "i_c", source)
    if not isinstance(i_p, int) or not isinstance(i_c, int):
        raise source.error("plot.i_p" if not isinstance(i_p, int) else "i_c", "an integer")
    source = source.named(f"{book}-{i_p}-{i_c}")
    summary = require_str(plot, "summary", source, "plot.summary")
    major = names(record, "major_characters", source)
    speakers = names(record, "speaking_characters_w_env", source)
    speakers += [] if ENVIRONMENT in speakers else [ENVIRONMENT]
    thoughts = {c["name"]: c.get("thought") or "" for c in named_objects(record, "key_characters", source)}
    described = {c["name"]: c.get("description") or "" for c in named_objects(plot, "key_characters", source)}
    given = as_object(require(record, "character_profiles", source), source, "character_profiles")
    profiles = {}
    for name in speakers:
        if name == ENVIRONMENT:
            continue
        if not isinstance(given.get(name, ""), str):
            raise source.error(f"character_profiles.{name}", "a string")
        parts = [described.get(name, "").strip("\n"), given.get(name, "").strip("\n")]
        if profile := "\n\n".join(p for p in parts if p).strip():
            profiles[name] = profile
    played = major[0]
    if played not in speakers:
        raise source.error("major_characters[0]", f"one of speaking_characters_w_env, got {played!r}")
    split = SPLITS[tag]
    if split not in options.splits:
        return None
    others = "\n\n".join(f"{n}: {p}" for n, p in profiles.items() if n != played) or "(none described)"
    system = prompts.render(
        "character",
        character=played,
        book=book,
        profile=profiles.get(played, "(no profile given)"),
        scenario=scenario,
        motivation=thoughts.get(played) or "(not given)",
        others=others,
    )
    meta = {
        "book": book,
        "i_p": i_p,
        "i_c": i_c,
        "split": split,
        "topic": record.get("topic") or "",
        "scenario": scenario,
        "plot_summary": summary,
        "character": played,
        "major_characters": major,
        "speakers": speakers,
        "profiles": profiles,
        "thoughts": thoughts,
        "dialogues": dialogue(record, source),
        "turns": options.max_rounds,
        # what a session's record states (rpbench.data.conversation_session)
        "card": profiles.get(played, ""),
        "persona": "the other characters of the scene and its environment",
        "goal": record.get("topic") or scenario,
    }
    return EvalExample(f"{book}-{i_p}-{i_c}", (Turn("system", system), Turn("user", START_CUE)), "", split, meta)


def read_test(path: str, options: CoserOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    file = existing_file(path)
    document = load_document(file)
    if not isinstance(document, list) or not document:
        raise Source(str(file), "file").error("<document>", "a non-empty JSON list of scenes")
    prompts = CoserPrompts.load(policy.prompts_source)
    result: ReadResult[EvalExample] = ReadResult(str(file))
    for i, raw in enumerate(document):
        try:
            example = scene(raw, Source(str(file), i, positional=True), options, prompts)
        except DataFormatError as error:
            result.add_error(error, policy.on_error)
            continue
        if example is not None:
            result.examples.append(example)
    for split in SPLITS.values():
        result.counts[split] = sum(e.task == split for e in result.examples)
    return result


FORMATS.register("coser")(DataFormat(CoserOptions, test=read_test))
