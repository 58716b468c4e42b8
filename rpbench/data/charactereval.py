"""CharacterEval (Tu et al. 2024, github.com/morecry/CharacterEval), read from a clone of the repository.

``data.files.test`` is the repository's root (or any folder with its ``data/`` layout), three JSON documents
(each a JSON list or object, whatever the ``.jsonl`` name says):

- ``data/test_data.jsonl``: a list of ``{"id": int, "role": str, "novel_name": str, "context": str}``;
  ``context`` is the dialogue so far, one ``<speaker>：<line>`` per line (full-width colon), the character
  (``role``) not speaking last;
- ``data/character_profiles.json``: ``{role: {field: value, ...}}``, the profile of every role;
- ``data/id2metric.jsonl``: ``{"<id>": [[<metric key>, <Chinese name>], ...]}``, the subjective metrics each
  record is scored on (the annotators' sparse assignment; ``METRICS`` lists the twelve).

A record is read only when id2metric names metrics for it (the authors' transform_format.py scores no other);
the others are counted (``without_metrics``). Records: id ``<id>``, task ``role``, the prompt a system turn
(``charactereval_prompts.character_system``), then the dialogue: the character's lines as assistant turns,
the others' as user turns (consecutive lines of others joined by newlines), each ``<speaker>：<line>``;
``meta`` holds the role, work, context, profile text and the record's metrics. No reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.charactereval_prompts import (
    OPENING,
    SPEAKER_SEPARATOR,
    character_system,
    profile_text,
    speaker_line,
)
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    NoRubrics,
    ReadPolicy,
    Source,
    as_object,
    load_document,
    require_str,
)
from rpbench.data.records import EvalExample, Turn

TEST_FILE = Path("data/test_data.jsonl")
PROFILES_FILE = Path("data/character_profiles.json")
METRICS_FILE = Path("data/id2metric.jsonl")


@dataclass(frozen=True)
class Metric:
    """One of CharacterEval's subjective metrics: its name in the paper, the repository's key, the Chinese
    name CharacterRM is asked with, and its dimension."""

    name: str
    key: str
    chinese: str
    dimension: str


CONVERSATIONAL = "Conversational Ability"
CONSISTENCY = "Character Consistency"
ATTRACTIVENESS = "Role-playing Attractiveness"
DIMENSIONS: tuple[str, ...] = (CONVERSATIONAL, CONSISTENCY, ATTRACTIVENESS)
METRICS: tuple[Metric, ...] = (
    Metric("Fluency", "Fluency", "对话流利度", CONVERSATIONAL),
    Metric("Coherency", "Coherence", "对话连贯性", CONVERSATIONAL),
    Metric("Consistency", "Consistency", "对话一致性", CONVERSATIONAL),
    Metric("Know-Exposure", "Exposure", "知识曝光度", CONSISTENCY),
    Metric("Know-Accuracy", "Accuracy", "知识准确率", CONSISTENCY),
    Metric("Know-Hallucination", "Hallucination", "知识幻觉性", CONSISTENCY),
    Metric("Persona-Behavior", "Behavior", "行为一致性", CONSISTENCY),
    Metric("Persona-Utterance", "Utterance", "言语一致性", CONSISTENCY),
    Metric("Human-likeness", "Humanlikeness", "类人程度", ATTRACTIVENESS),
    Metric("Communication Skills", "Communication_skills", "交流技巧", ATTRACTIVENESS),
    Metric("Expression Diversity", "Diversity", "表现多样性", ATTRACTIVENESS),
    Metric("Empathy", "Empathy", "共情度", ATTRACTIVENESS),
)
BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS}


def read_document(path: Path, kind: type) -> Any:
    if not path.is_file():
        raise DataFormatError(path, "file", "<document>", "a file of the CharacterEval layout (missing)")
    document = load_document(path)
    if not isinstance(document, kind):
        raise DataFormatError(path, "file", "<document>", f"a JSON {'list' if kind is list else 'object'}")
    return document


def read_profiles(path: Path) -> dict[str, str]:
    """Each role's profile text (``profile_text``)."""
    profiles = {}
    for role, profile in read_document(path, dict).items():
        if not isinstance(profile, dict) or not profile:
            raise DataFormatError(path, repr(role), role, "a non-empty object of profile fields")
        profiles[role] = profile_text(profile)
    return profiles


def read_metrics(path: Path) -> dict[str, tuple[Metric, ...]]:
    """Each record id's metrics, checked against ``METRICS`` (key and Chinese name)."""
    out = {}
    for rid, entries in read_document(path, dict).items():
        if not isinstance(entries, list) or not entries:
            raise DataFormatError(path, rid, rid, "a non-empty list of [metric key, Chinese name] pairs")
        metrics = []
        for i, entry in enumerate(entries):
            field = f"{rid}[{i}]"
            if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in BY_KEY):
                raise DataFormatError(path, rid, field, f"[metric key, Chinese name], a key from {', '.join(BY_KEY)}")
            metric = BY_KEY[entry[0]]
            if entry[1] != metric.chinese:
                raise DataFormatError(
                    path, rid, field, f"{metric.key}'s Chinese name {metric.chinese!r}, got {entry[1]!r}"
                )
            metrics.append(metric)
        if len(set(metrics)) != len(metrics):
            raise DataFormatError(path, rid, rid, "each metric once")
        out[rid] = tuple(metrics)
    return out


def dialogue_lines(context: str, source: Source) -> list[tuple[str, str]]:
    """(speaker, line) of each line of ``context``."""
    lines = []
    for number, line in enumerate(context.split("\n"), start=1):
        speaker, separator, text = line.partition(SPEAKER_SEPARATOR)
        if not separator or not speaker.strip():
            raise source.error("context", f"line {number}: '<speaker>{SPEAKER_SEPARATOR}<line>', got {line!r}")
        lines.append((speaker, text))
    return lines


def dialogue_turns(role: str, lines: Sequence[tuple[str, str]]) -> list[Turn]:
    """The character's lines as assistant turns, the others' as user turns (runs of them joined)."""
    turns: list[Turn] = [Turn("user", OPENING)] if lines[0][0] == role else []
    for speaker, text in lines:
        kind, line = ("assistant" if speaker == role else "user"), speaker_line(speaker, text)
        if turns and turns[-1].role == kind:
            turns[-1] = Turn(kind, f"{turns[-1].content}\n{line}")
        else:
            turns.append(Turn(kind, line))
    return turns


def read_record(
    raw: Any, source: Source, profiles: Mapping[str, str], metrics: Mapping[str, tuple[Metric, ...]]
) -> EvalExample | None:
    """The record as an EvalExample; None when id2metric scores it on nothing."""
    record = as_object(raw, source)
    rid = record.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (int, str)) or not str(rid).strip():
        raise source.error("id", f"an integer or string id, got {rid!r}")
    source = source.named(str(rid))
    role = require_str(record, "role", source)
    if role not in profiles:
        raise source.error("role", f"a role with a profile in {PROFILES_FILE}, got {role!r}")
    context = require_str(record, "context", source)
    lines = dialogue_lines(context, source)
    if lines[-1][0] == role:
        raise source.error("context", f"a dialogue whose last line is not {role}'s (the model writes that line)")
    if str(rid) not in metrics:
        return None
    meta = {
        "role": role,
        "novel_name": require_str(record, "novel_name", source),
        "context": context,
        "profile": profiles[role],
        "metrics": [m.key for m in metrics[str(rid)]],
    }
    prompt = (Turn("system", character_system(profiles[role], role)), *dialogue_turns(role, lines))
    return EvalExample(str(rid), prompt, "", role, meta)


def read_test(path: str | Path, options: NoRubrics, policy: ReadPolicy) -> ReadResult[EvalExample]:
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: a clone of CharacterEval expected (a folder with {TEST_FILE})")
    profiles = read_profiles(root / PROFILES_FILE)
    metrics = read_metrics(root / METRICS_FILE)
    test_path = root / TEST_FILE
    result: ReadResult[EvalExample] = ReadResult(str(test_path), counts={"without_metrics": 0})
    seen: set[str] = set()
    for index, raw in enumerate(read_document(test_path, list)):
        source = Source(str(test_path), index, positional=True)
        try:
            example = read_record(raw, source, profiles, metrics)
            if example is not None and example.id in seen:
                raise source.named(example.id).error("id", "an id no other record has")
        except DataFormatError as error:
            result.add_error(error, policy.on_error)
            continue
        if example is None:
            result.counts["without_metrics"] += 1
            continue
        seen.add(example.id)
        result.examples.append(example)
    result.counts["metric_assignments"] = sum(len(e.meta["metrics"]) for e in result.examples)
    result.counts["metrics_without_record"] = len(set(metrics) - seen)
    return result


FORMATS.register("charactereval")(DataFormat(NoRubrics, test=read_test))
