"""Conversation scenarios (``format: conversation``): what drives the sessions of ``evaluator=conversation``
(the test split) and of the training environment ``env=conversation`` (the train split).

A JSON Lines file (or JSON list), one scenario per record:

- ``id``: the scenario's name (string or integer, unique in the file);
- ``character``: the name the evaluated model plays; ``card``: its character card (who it is, what it knows);
- ``persona``: who the simulated user is; ``goal``: what the user wants from the conversation;
- ``opening``: the user's first message;
- ``turns``: how many replies the character gives at most (an integer >= 1);
- ``level`` and ``tactic`` (both or neither): an adversarial scenario's level of pressure (one of
  ``rpbench.data.conversation_pressure.LEVELS``) and how its simulated user presses
  (``evaluator=conversation_adversarial``).

Each becomes an ``EvalExample`` ``<id>`` whose prompt is the character's system prompt (rpbench's wording,
``CHARACTER_PROMPT``) and the opening; ``task`` is the character's name, the rest is in ``meta``. Errors
name the file, the record and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rpbench.data.conversation_pressure import LEVELS
from rpbench.data.errors import ReadResult
from rpbench.data.readers import (
    FORMATS,
    DataFormat,
    NoRubrics,
    ReadPolicy,
    Source,
    as_object,
    read_file,
    record_id,
    require,
    require_str,
)
from rpbench.data.records import EvalExample, Turn

TEXT_FIELDS: tuple[str, ...] = ("character", "card", "persona", "goal", "opening")
PRESSURE_FIELDS: tuple[str, ...] = ("level", "tactic")  # an adversarial scenario's, both or neither
CHARACTER_PROMPT = (
    "You are {character}. Stay in character for the whole conversation: speak as {character} would, know "
    "what {character} knows and nothing beyond it, and never mention being an AI or a language model.\n\n"
    "Character card:\n{card}"
)


def character_prompt(character: str, card: str) -> str:
    """The evaluated model's system prompt for a scenario (multi-turn DPO's pairs train on it too)."""
    return CHARACTER_PROMPT.format(character=character.strip(), card=card.strip())


def parse_scenario(raw: Any, source: Source) -> EvalExample:
    record = as_object(raw, source)
    if "id" not in record:
        raise source.error("id", "required (a scenario names itself), but the record has none")
    rid, source = record_id(record, "id", source)
    text = {name: require_str(record, name, source).strip() for name in TEXT_FIELDS}
    turns = require(record, "turns", source)
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise source.error("turns", f"an integer >= 1 (the character's replies at most), got {turns!r}")
    unknown = sorted(set(record) - {"id", "turns", *TEXT_FIELDS, *PRESSURE_FIELDS})
    if unknown:
        raise source.error(unknown[0], f"a known field ({', '.join(['id', *TEXT_FIELDS, 'turns', *PRESSURE_FIELDS])})")
    prompt = (Turn("system", character_prompt(text["character"], text["card"])), Turn("user", text["opening"]))
    return EvalExample(rid, prompt, "", text["character"], {**text, "turns": turns, **pressure(record, source)})


def pressure(record: dict[str, Any], source: Source) -> dict[str, str]:
    """An adversarial scenario's ``level`` and ``tactic`` (none for a plain scenario)."""
    given = [name for name in PRESSURE_FIELDS if name in record]
    if not given:
        return {}
    if len(given) == 1:
        missing = next(name for name in PRESSURE_FIELDS if name not in given)
        raise source.error(missing, f"required with {given[0]} (an adversarial scenario names its level and tactic)")
    level, tactic = (require_str(record, name, source).strip() for name in PRESSURE_FIELDS)
    if level not in LEVELS:
        raise source.error("level", f"one of {', '.join(LEVELS)}, got {level!r}")
    return {"level": level, "tactic": tactic}


def read_scenarios(path: str | Path, options: NoRubrics, policy: ReadPolicy) -> ReadResult[EvalExample]:
    return read_file(path, parse_scenario, policy.on_error)


# test: evaluator=conversation's sessions; train: env=conversation's (GRPO on whole sessions)
FORMATS.register("conversation")(DataFormat(NoRubrics, train=read_scenarios, test=read_scenarios))
