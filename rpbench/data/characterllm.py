"""Character-LLM's interview questions (Shao et al. 2023; choosewhatulike/trainable-agents), read from a clone.

``data.files.test`` is the repository's root (or any folder with its ``data/seed_data`` layout):

- ``data/seed_data/profiles/wiki_<Name>.txt``: a ``# <full name>`` title line, then paragraphs separated by
  blank lines; the first paragraph is the profile the interviewer and the judge see (as the authors' scripts);
- ``data/seed_data/questions/generated_agent_interview_<Name>.json``: the Single setting, a JSON list of
  ``{"topic_id": str, "topic": str, "question": str}``, each question asked alone;
- ``data/seed_data/questions/generated_agent_interview_for_multiturn_<Name>.json``: the Turns setting, the
  same fields, each question the topic of a multi-turn interview.

Every character with a Single question file is read, with its profile (missing: an error naming it) and
its Turns file when present. Records: ``single/<Name>/<i>`` and ``turns/<Name>/<i>`` (``task`` = setting),
the prompt the system prompt (``characterllm_prompts`` ``character``, in the scene of ``status`` and
``loc_time``) and the question; no reference. Option ``prompts_source`` (``prompts.source``) picks the
authors' templates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.characterllm_prompts import CharacterLLMPrompts
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    NoRubrics,
    ReadPolicy,
    Source,
    as_object,
    optional_str,
    require_str,
)
from rpbench.data.records import EvalExample, Turn

SEED = Path("data/seed_data")
SINGLE_PREFIX = "generated_agent_interview_"
TURNS_PREFIX = "generated_agent_interview_for_multiturn_"
SETTINGS: tuple[str, ...] = ("single", "turns")


def read_profile(path: Path) -> tuple[str, str]:
    """(full name, first paragraph) of a profile file."""
    if not path.is_file():
        raise DataFormatError(path, "file", "<document>", "a character profile file (missing)")
    parts = [p.strip() for p in path.read_text(encoding="utf-8-sig").strip().split("\n\n") if p.strip()]
    if not parts or not parts[0].startswith("# ") or not parts[0][2:].strip():
        raise DataFormatError(path, 1, "title", "a first line '# <character name>'")
    if len(parts) < 2:
        raise DataFormatError(path, 2, "profile", "a paragraph after the title (found none)")
    return parts[0][2:].strip(), parts[1]


def read_questions(path: Path) -> list[tuple[Source, dict[str, Any]]]:
    """(source, record) per question of an interview file: a JSON list of objects with a ``question``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataFormatError(path, "file", "<document>", f"one valid UTF-8 JSON list ({error})") from None
    if not isinstance(document, list) or not document:
        raise DataFormatError(path, "file", "<document>", "a non-empty JSON list of question objects")
    return [(Source(str(path), i, positional=True), raw) for i, raw in enumerate(document)]


def read_test(path: str | Path, options: NoRubrics, policy: ReadPolicy) -> ReadResult[EvalExample]:
    root = Path(path)
    questions = root / SEED / "questions"
    if not questions.is_dir():
        raise FileNotFoundError(f"{root}: no {SEED / 'questions'} folder (expected a clone of trainable-agents)")
    names = sorted(
        p.stem.removeprefix(SINGLE_PREFIX)
        for p in questions.glob(f"{SINGLE_PREFIX}*.json")
        if not p.stem.startswith(TURNS_PREFIX)
    )
    if not names:
        raise FileNotFoundError(f"{questions}: no {SINGLE_PREFIX}<Name>.json interview file")
    prompts = CharacterLLMPrompts.load(policy.prompts_source)
    loc_time = prompts.render("loc_time")
    result: ReadResult[EvalExample] = ReadResult(str(root), counts={"characters": len(names)})
    for name in names:
        full_name, profile = read_profile(root / SEED / "profiles" / f"wiki_{name}.txt")
        system = prompts.render(
            "character", character=full_name, loc_time=loc_time, status=prompts.render("status", name=name)
        )
        files = {"single": questions / f"{SINGLE_PREFIX}{name}.json", "turns": questions / f"{TURNS_PREFIX}{name}.json"}
        for setting, file in files.items():
            if not file.is_file():
                continue
            for source, raw in read_questions(file):
                try:
                    record = as_object(raw, source)
                    question = require_str(record, "question", source)
                    meta = {
                        "setting": setting,
                        "character": name,
                        "character_name": full_name,
                        "profile": profile,
                        "topic": optional_str(record, "topic", source),
                        "topic_id": optional_str(record, "topic_id", source),
                    }
                    prompt = (Turn("system", system), Turn("user", question))
                    result.examples.append(EvalExample(f"{setting}/{name}/{source.record}", prompt, "", setting, meta))
                except DataFormatError as error:
                    result.add_error(error, policy.on_error)
    for setting in SETTINGS:
        result.counts[setting] = sum(e.task == setting for e in result.examples)
    return result


FORMATS.register("characterllm")(DataFormat(NoRubrics, test=read_test))
