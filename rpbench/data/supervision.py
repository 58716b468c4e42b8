"""Which assistant turns of a training conversation are trained on (``data.supervise``, ``data.speaker``).

``data.supervise``: ``all`` assistant turns, only the ``last``, or the name of a per-turn field (e.g.
``train``, ``weight``, ``loss``): a turn whose field is false or 0 is context, not trained on (true, 1 or no
field: trained; a fractional weight is an error: the loss weighs every supervised token alike). The field is
read from the messages of every reader that reads message lists (``readers.parse_conversation``: RoleMRC,
MMRole, ``data=custom``); a field no turn of the file carries is an error (a typo would otherwise train on
everything). ``data.speaker``: only the assistant turns of that named speaker are trained on, the other
speakers' turns become context (a turn's speaker: OpenAI's per-message ``name``; MMRole: the record's
character); a speaker no record names is an error. Records left with no trained turn are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.data.records import SFTExample

SUPERVISE_WHOLE = ("all", "last")  # data.supervise's policies; any other value names a per-turn field
SPEAKER_KEY = "name"  # the message key naming its speaker (OpenAI's chat format)


@dataclass
class TurnField:
    """The per-turn field ``data.supervise`` names, and how many turns of a file carried it."""

    name: str
    found: int = 0

    def trained(self, item: Mapping[str, Any], role: str, source, where: str) -> bool:
        """Whether the message ``item`` (at ``where`` of the record ``source``: a ``readers.Source``) is
        trained on by its field (absent: it is)."""
        if self.name not in item:
            return True
        self.found += 1
        value, field = item[self.name], f"{where}.{self.name}"
        if not isinstance(value, bool) and not (isinstance(value, int | float) and value in (0, 1)):
            raise source.error(field, f"true/false or 1/0 (data.supervise={self.name}), got {value!r}")
        if value and role != "assistant":
            raise source.error(field, f"false on a {role} turn (only assistant turns are trained), got {value!r}")
        return bool(value)


def turn_field(supervise: str) -> TurnField | None:
    """The per-turn field ``data.supervise`` names, or None for ``all`` and ``last``."""
    if not isinstance(supervise, str) or not supervise.strip():
        raise ConfigError(f"data.supervise: all, last or a per-turn field name, got {supervise!r}")
    return None if supervise in SUPERVISE_WHOLE else TurnField(supervise)


def check_found(field: TurnField | None, file: str) -> None:
    """A per-turn field no turn of ``file`` carries is an error (named, with the file)."""
    if field is not None and field.found == 0:
        raise ConfigError(
            f"data.supervise={field.name}: no turn of {file} has a {field.name!r} field (choose all, last, or a "
            "field the messages carry)"
        )


def apply_supervision(
    examples: Sequence[SFTExample], supervise: str, speaker: str | None, file: str
) -> tuple[list[SFTExample], dict[str, int]]:
    """The examples as ``data.supervise`` and ``data.speaker`` train them, and the counts the run reports:
    ``supervised_turns``, ``context_turns`` (assistant turns kept as context) and ``without_supervised_turn``
    (records dropped: none of their turns is trained on)."""
    if speaker is not None and not any(t.speaker == speaker for e in examples for t in e.turns):
        raise ConfigError(f"data.speaker={speaker!r}: no turn of {file} is spoken by {speaker!r}")
    kept, counts = [], {"supervised_turns": 0, "context_turns": 0, "without_supervised_turn": 0}
    for example in examples:
        turns = tuple(_for_speaker(turn, speaker) for turn in example.turns)
        trained = [i for i, t in enumerate(turns) if t.role == "assistant" and t.trained]
        last_only = supervise == "last" or example.supervise == "last"
        if not trained or (example.supervise == "last" and trained[-1] != len(turns) - 1):
            counts["without_supervised_turn"] += 1
            continue
        if last_only:
            turns = turns[: trained[-1] + 1]
        supervised = 1 if last_only else len(trained)
        counts["supervised_turns"] += supervised
        counts["context_turns"] += sum(t.role == "assistant" for t in turns) - supervised
        kept.append(replace(example, turns=turns, supervise="last" if last_only else example.supervise))
    return kept, counts


def _for_speaker(turn, speaker: str | None):
    if speaker is None or turn.role != "assistant" or turn.speaker == speaker:
        return turn
    return replace(turn, trained=False)
