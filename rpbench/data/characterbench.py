"""CharacterBench's test files (Zhou et al., AAAI 2025; github.com/thu-coai/CharacterBench), read from a clone.

``data.files.test`` is the repository's root (or any folder with its ``eval_data/raw_data`` layout): one JSON
list per subset, ``eval_data/raw_data/<subset>_test.json`` (``characterbench_prompts.SUBSETS``: the 11
dimensions, attribute and behaviour consistency each with a ``bot`` and a ``human`` file). A record (the
fields rpbench reads; others are kept out):

- ``character_name``, ``character_profile`` (a string, or any JSON value, shown as the authors' ``str()``
  does), ``user_profile`` (optional), ``greeting`` (optional: the character's first message),
- ``dialogue``: a list of ``{"speaker", "utterance"}``; the speaker is ``user``/the ``user_name`` or
  ``character``/the ``character_name``; it ends with the user's probe query, which the model answers;
- the judge's reference, where the subset has one: ``messages.output.dialogue_segments`` (memory; the
  character's earlier lines), ``messages.output.answer`` (fact accuracy, attribute consistency bot),
  ``messages.reference`` (attribute consistency human), ``messages.output.reference`` (behaviour consistency
  bot), ``response_messages.character_style`` (behaviour consistency human; also appended to the profile, as
  the authors do), ``response_messages.reference_response`` (boundary), ``messages.output.emotion`` (the two
  emotion subsets);
- ``annotation_score``: the human score of the file's annotated reply; the largest in a file is the top of
  the subset's scale, which the authors' score normalisation divides by (a number, or a numeric string);
- ``translation_en``: the same fields in English (a field it lacks is read from the Chinese record, as the
  authors' English script does);
- ``id`` (optional; else the position).

``data.languages`` picks zh, en or both; a record is ``<lang>/<subset>/<id>``, ``task`` = the subset, its prompt
one user message (``characterbench_prompts`` ``roleplay_<lang>``: the profiles and the dialogue as
``user: ...``/``assistant: ...`` lines, the greeting first), no reference. ``meta`` holds what the judge's
prompt needs. A subset file that is missing is left out (counted as ``missing_subsets``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.characterbench_prompts import (
    CONTEXT_FREE,
    DIMENSION_OF,
    LANGUAGES,
    SUBSETS,
    WITH_REFERENCE,
    CharacterBenchPrompts,
)
from rpbench.data.errors import ReadResult
from rpbench.data.readers import FORMATS, DataFormat, FormatOptions, ReadPolicy, Source, as_object, require_list
from rpbench.data.records import EvalExample, Turn

RAW = Path("eval_data/raw_data")
USER_CUE = {"zh": "用户", "en": "User"}
COLON = "："  # the authors' full-width colon, in both languages' judge prompts
# subset -> the reference's path in a record
REFERENCE_AT: dict[str, tuple[str, ...]] = {
    "memory_consistency": ("messages", "output", "dialogue_segments"),
    "fact_accuracy": ("messages", "output", "answer"),
    "attribute_consistency_bot": ("messages", "output", "answer"),
    "attribute_consistency_human": ("messages", "reference"),
    "behavior_consistency_bot": ("messages", "output", "reference"),
    "behavior_consistency_human": ("response_messages", "character_style"),
    "boundary_consistency": ("response_messages", "reference_response"),
    "emotion_self_regulation": ("messages", "output", "emotion"),
    "empathetic_responsiveness": ("messages", "output", "emotion"),
}


@dataclass(frozen=True, kw_only=True)
class CharacterBenchOptions(FormatOptions):
    """``data.languages``: the languages evaluated (zh, en or both); ``task_dimensions`` is null."""

    languages: tuple[str, ...]
    task_dimensions: None

    def problems(self):
        if not self.languages or any(lang not in LANGUAGES for lang in self.languages):
            return [("languages", f"a non-empty list from {', '.join(LANGUAGES)}")]
        return []


def _at(record: dict[str, Any], path: tuple[str, ...], source: Source) -> Any:
    value: Any = record
    for depth, key in enumerate(path):
        if not isinstance(value, dict) or key not in value:
            raise source.error(".".join(path[: depth + 1]), "required, but the record has no such field")
        value = value[key]
    return value


def _text(value: Any, source: Source, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise source.error(field, f"a non-empty string, got {json.dumps(value, ensure_ascii=False)[:60]}")
    return value


def scale_top(raw: Any, source: Source) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise source.error("annotation_score", f"a number, got {raw!r}") from None
    if value <= 0:
        raise source.error("annotation_score", f"a number > 0, got {raw!r}")
    return value


def read_record(
    raw: dict[str, Any], subset: str, language: str, source: Source, prompts: CharacterBenchPrompts
) -> EvalExample:
    top = as_object(raw, source)
    record = top if language == "zh" else {**top, **as_object(top.get("translation_en"), source, "translation_en")}
    prefix = "" if language == "zh" else "translation_en."
    name = _text(record.get("character_name"), source, prefix + "character_name").strip()
    profile_raw = record.get("character_profile")
    if profile_raw is None or profile_raw == "":
        raise source.error(prefix + "character_profile", "required, but the record has no such field")
    profile = profile_raw if isinstance(profile_raw, str) else str(profile_raw)
    user_name = str(record.get("user_name") or "").strip()
    turns = []
    for i, raw_turn in enumerate(require_list(record, "dialogue", source, prefix + "dialogue")):
        turn = as_object(raw_turn, source, f"{prefix}dialogue[{i}]")
        speaker = str(turn.get("speaker", "")).strip()
        text = turn.get("utterance")
        if not isinstance(text, str):
            raise source.error(f"{prefix}dialogue[{i}].utterance", "a string")
        if speaker.lower() == "user" or (user_name and speaker == user_name):
            role = "user"
        elif speaker.lower() == "character" or speaker == name:
            role = "assistant"
        else:
            raise source.error(
                f"{prefix}dialogue[{i}].speaker", f"user, character, {user_name!r} or {name!r}, got {speaker!r}"
            )
        turns.append((role, text))
    if turns[-1][0] != "user":
        raise source.error(prefix + "dialogue", "a dialogue ending with the user's query (the last is the character's)")
    greeting = record.get("greeting") or ""
    greeting = "" if greeting == "N/A" else str(greeting)
    shown = [("assistant", greeting), *turns] if greeting else turns
    if shown[0][0] == "assistant":  # the authors' dialogue opens with a user line, empty before a greeting
        shown = [("user", ""), *shown]
    reference = ""
    if subset in WITH_REFERENCE:
        value = _at(record, REFERENCE_AT[subset], source)
        field = prefix + ".".join(REFERENCE_AT[subset])
        if subset == "memory_consistency":
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise source.error(field, "a list of strings (the character's earlier lines)")
            reference = "".join(f"{name}{COLON}{s}\n" for s in value)
        else:
            reference = _text(value, source, field)
    if subset == "behavior_consistency_human":
        profile += reference  # the authors append the style to the profile
    user_cue = USER_CUE[language]
    context = "".join(f"{user_cue if role == 'user' else name}{COLON}{text}\n" for role, text in turns[:-1])
    prompt = prompts.render(
        f"roleplay_{language}",
        character_profile=profile,
        user_profile=str(record.get("user_profile") or "无"),
        dialogue="\n".join(f"{role}: {text}" for role, text in shown),
    )
    score = top.get("annotation_score")
    meta = {
        "language": language,
        "subset": subset,
        "dimension": DIMENSION_OF[subset],
        "character": name,
        "character_profile": profile,
        "dialogue": "" if subset in CONTEXT_FREE else context,
        "user_query": f"{user_cue}{COLON}{turns[-1][1]}",
        "reference": reference,
        "annotation_score": None if score is None else scale_top(score, source),
    }
    rid = str(top.get("id", source.record))
    return EvalExample(f"{language}/{subset}/{rid}", (Turn("user", prompt),), "", subset, meta)


def read_test(path: str | Path, options: CharacterBenchOptions, policy: ReadPolicy) -> ReadResult[EvalExample]:
    root = Path(path)
    if not (root / RAW).is_dir():
        raise FileNotFoundError(f"{root}: no {RAW} folder (expected a clone of thu-coai/CharacterBench)")
    prompts = CharacterBenchPrompts.load(policy.prompts_source)
    result: ReadResult[EvalExample] = ReadResult(str(root), counts={})
    missing = []
    for subset in SUBSETS:
        file = root / RAW / f"{subset}_test.json"
        if not file.is_file():
            missing.append(subset)
            continue
        try:
            document = json.loads(file.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise DataFormatError(file, "file", "<document>", f"one valid UTF-8 JSON list ({error})") from None
        if not isinstance(document, list) or not document:
            raise DataFormatError(file, "file", "<document>", "a non-empty JSON list of records")
        for language in options.languages:
            for i, raw in enumerate(document):
                source = Source(str(file), i, positional=True)
                if isinstance(raw, dict) and "id" in raw:
                    source = source.named(str(raw["id"]))
                try:
                    result.examples.append(read_record(raw, subset, language, source, prompts))
                except DataFormatError as error:
                    result.add_error(error, policy.on_error)
    if len(missing) == len(SUBSETS):
        raise FileNotFoundError(f"{root / RAW}: no <subset>_test.json file (subsets: {', '.join(SUBSETS)})")
    result.counts["missing_subsets"] = len(missing)
    for language in options.languages:
        result.counts[language] = sum(e.meta["language"] == language for e in result.examples)
    return result


FORMATS.register("characterbench")(DataFormat(CharacterBenchOptions, test=read_test))
