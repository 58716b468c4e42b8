"""RMTBench's dialogues (Xiang et al. 2025; huggingface.co/datasets/xiangh/RMTBENCH, gated: accept its terms,
then download), read from the downloaded folder.

``data.files.test`` is the folder holding ``rmtbench_<data.version>_<lang>.json`` for each of
``data.languages`` (version ``claude``: the paper's data, written with Claude 3.5; ``claude45``: the later
one). Each file is a JSON list of characters, as the dataset card describes them:

- ``name``, ``description``: the character;
- ``character_understanding``, ``character_maintenance``, ``implicit_motivations``: lists of dialogue blocks;
  a block is the user's turns of one dialogue, a list of strings (or of objects with a string ``content``);
- ``user_preference``: a list of ``{"chat": [user turns], "question": str or [str], "answer": str or [str]}``:
  the questions follow the chat as the last user turns; the answers are the judge's reference;
- ``security`` (optional, not in the released files: the paper's poison dialogues), blocks like the first three.

The release holds only the user's side: the model writes every character turn (``rpbench.eval.benchmarks.
rmtbench``). A record is one dialogue, ``<lang>/<scenario>/<name>/<i>`` (``task`` = the scenario), its prompt the
character's system prompt (``rmtbench_prompts`` ``character_<lang>``); ``meta["user_turns"]`` the user's turns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.errors import ReadResult
from rpbench.data.readers import FORMATS, DataFormat, FormatOptions, ReadPolicy, Source, as_object, require_str
from rpbench.data.records import EvalExample, Turn
from rpbench.data.rmtbench_prompts import LANGUAGES, SCENARIOS, RMTBenchPrompts

VERSIONS: tuple[str, ...] = ("claude", "claude45")


@dataclass(frozen=True, kw_only=True)
class RMTBenchOptions(FormatOptions):
    """``data.languages`` (zh, en or both) and ``data.version`` (which release: claude or claude45)."""

    languages: tuple[str, ...]
    version: str
    task_dimensions: None

    def problems(self):
        found = []
        if not self.languages or any(lang not in LANGUAGES for lang in self.languages):
            found.append(("languages", f"a non-empty list from {', '.join(LANGUAGES)}"))
        if self.version not in VERSIONS:
            found.append(("version", f"one of {', '.join(VERSIONS)}"))
        return found


def _strings(value: Any, source: Source, field: str) -> list[str]:
    """A non-empty list of non-empty user turns (strings, or objects with a string ``content``); a lone string
    is one turn."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise source.error(field, "a non-empty list of user turns")
    turns = []
    for i, item in enumerate(items):
        text = item.get("content") if isinstance(item, dict) else item
        if not isinstance(text, str) or not text.strip():
            raise source.error(f"{field}[{i}]", "a non-empty string (or an object with a string 'content')")
        turns.append(text)
    return turns


def read_character(raw: Any, language: str, source: Source, prompts: RMTBenchPrompts) -> list[EvalExample]:
    record = as_object(raw, source)
    name = require_str(record, "name", source).strip()
    description = require_str(record, "description", source)
    system = prompts.render(f"character_{language}", name=name, description=description)
    examples = []
    for scenario in SCENARIOS:
        if scenario not in record:
            continue
        blocks = record[scenario]
        if not isinstance(blocks, list):
            raise source.error(scenario, "a list of dialogues")
        for i, block in enumerate(blocks):
            field = f"{scenario}[{i}]"
            reference = ""
            if scenario == "user_preference":
                entry = as_object(block, source, field)
                if "chat" not in entry or "question" not in entry or "answer" not in entry:
                    missing = next(k for k in ("chat", "question", "answer") if k not in entry)
                    raise source.error(f"{field}.{missing}", "required, but the record has no such field")
                turns = _strings(entry["chat"], source, f"{field}.chat")
                turns += _strings(entry["question"], source, f"{field}.question")
                reference = "\n".join(_strings(entry["answer"], source, f"{field}.answer"))
            else:
                turns = _strings(block, source, field)
            meta = {
                "language": language,
                "scenario": scenario,
                "character": name,
                "description": description,
                "user_turns": turns,
                "reference": reference,
            }
            rid = f"{language}/{scenario}/{name}/{i}"
            examples.append(EvalExample(rid, (Turn("system", system),), "", scenario, meta))
    if not examples:
        raise source.error("<record>", f"at least one dialogue under {', '.join(SCENARIOS)}")
    return examples


def read_test(path: str | Path, options: RMTBenchOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a folder (expected the RMTBench download, rmtbench_*.json)")
    prompts = RMTBenchPrompts.load(policy.prompts_source)
    result: ReadResult[EvalExample] = ReadResult(str(root), counts={})
    for language in options.languages:
        file = root / f"rmtbench_{options.version}_{language}.json"
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: no such file (data.languages has {language}, data.version {options.version})"
            )
        try:
            document = json.loads(file.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise DataFormatError(file, "file", "<document>", f"one valid UTF-8 JSON list ({error})") from None
        if not isinstance(document, list) or not document:
            raise DataFormatError(file, "file", "<document>", "a non-empty JSON list of characters")
        for i, raw in enumerate(document):
            source = Source(str(file), i, positional=True)
            if isinstance(raw, dict) and isinstance(raw.get("name"), str):
                source = source.named(raw["name"])
            try:
                result.examples.extend(read_character(raw, language, source, prompts))
            except DataFormatError as error:
                result.add_error(error, policy.on_error)
        result.counts[language] = sum(e.meta["language"] == language for e in result.examples)
    for scenario in SCENARIOS:
        result.counts[scenario] = sum(e.task == scenario for e in result.examples)
    result.counts["user_turns"] = sum(len(e.meta["user_turns"]) for e in result.examples)
    return result


FORMATS.register("rmtbench")(DataFormat(RMTBenchOptions, test=read_test))
