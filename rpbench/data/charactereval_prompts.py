"""CharacterEval's texts around a dialogue (Tu et al. 2024; github.com/morecry/CharacterEval): the character's
system prompt the evaluated model answers under, and the input CharacterRM scores.

The system prompt is rpbench's own wording with the authors' slots (the profile, then the instruction to
speak as the character); the reward model's input keeps the section tags it was trained on (``<RoleInfo>``,
``<Context>``, ``<Response>``, ``<Dimension>``, each followed by a blank line), in the authors' order. The
profile enters both as the authors' scripts write it: the Python ``str`` of the profile's dictionary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SPEAKER_SEPARATOR = "："  # the full-width colon between a speaker and the line in ``context``


def profile_text(profile: Mapping[str, Any]) -> str:
    """The profile as the authors' scripts print it (``str`` of the dict: single quotes, insertion order)."""
    return str(dict(profile))


def character_system(profile: str, role: str) -> str:
    """The evaluated model's system prompt: the profile, then who it plays and what it writes."""
    return (
        f"{profile}\n"
        f"以上是{role}的人物资料。请你以{role}的身份参与下面的对话，"
        f"按“{role}{SPEAKER_SEPARATOR}内容”的格式只说{role}的下一句话。"
    )


OPENING = "（对话开始，请你先说。）"  # the user turn before the character's first line when the character opens


def speaker_line(speaker: str, text: str) -> str:
    return f"{speaker}{SPEAKER_SEPARATOR}{text}"


def reward_model_input(profile: str, context: str, response: str, dimension: str) -> str:
    """What CharacterRM reads: profile, dialogue, response and the metric's Chinese name, in tagged sections."""
    sections = (("RoleInfo", profile), ("Context", context), ("Response", response), ("Dimension", dimension))
    return "\n\n".join(f"<{tag}>\n\n{text}" for tag, text in sections)
