"""Step 2: persona -> role profile of seven components (the paper's appendix D), checked strictly.

The seven: name and brief description, abilities and skills, speech style, personality, past experience and
background, ability and knowledge boundaries, speech examples. A reply is rejected with a named reason:
``not_json``, ``not_an_object``, ``missing_component``, ``empty_component``, ``wrong_type``,
``too_few_speech_examples``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rpbench.synth.calls import Checked

TEXT_FIELDS = ("name", "description", "speech_style", "personality", "background", "knowledge_boundaries")
LIST_FIELDS = ("abilities", "speech_examples")
COMPONENTS = (*TEXT_FIELDS, *LIST_FIELDS)
MIN_SPEECH_EXAMPLES = 2
NARRATION = re.compile(r"\([^()]*\)\s*")
FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def json_payload(text: str) -> Any:
    """The JSON a reply holds (a ```json fence around it is allowed); raises ValueError."""
    stripped = text.strip()
    fenced = FENCE.match(stripped)
    return json.loads(fenced.group(1) if fenced else stripped)


def check_profile(text: str) -> Checked:
    try:
        data = json_payload(text)
    except ValueError as error:
        return Checked(reason=f"not_json: {error}")
    if not isinstance(data, dict):
        return Checked(reason=f"not_an_object: a JSON {type(data).__name__}")
    missing = [k for k in COMPONENTS if k not in data]
    if missing:
        return Checked(reason=f"missing_component: {', '.join(missing)}")
    profile: dict[str, Any] = {}
    for key in TEXT_FIELDS:
        value = data[key]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "; ".join(v.strip() for v in value)  # a list of traits is as good as a sentence of them
        if not isinstance(value, str):
            return Checked(reason=f"wrong_type: {key} is a {type(value).__name__}, not text")
        if not value.strip():
            return Checked(reason=f"empty_component: {key}")
        profile[key] = value.strip()
    for key in LIST_FIELDS:
        value = data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return Checked(reason=f"wrong_type: {key} is not a list of strings")
        items = [v.strip() for v in value if v.strip()]
        if not items:
            return Checked(reason=f"empty_component: {key}")
        profile[key] = items
    if len(profile["speech_examples"]) < MIN_SPEECH_EXAMPLES:
        return Checked(reason=f"too_few_speech_examples: {len(profile['speech_examples'])} < {MIN_SPEECH_EXAMPLES}")
    return Checked(value={"profile": profile})


def without_narration(text: str) -> str:
    return " ".join(NARRATION.sub("", text).split())


def profile_text(profile: Mapping[str, Any], narration: bool) -> str:
    """The profile as the character sheet prompts and system turns show; ``narration=False`` removes the
    narration from the speech examples (as the paper does for narration-free data)."""
    examples = [e if narration else without_narration(e) for e in profile["speech_examples"]]
    lines = [
        f"Name: {profile['name']}",
        f"Description: {profile['description']}",
        "Abilities and skills: " + "; ".join(profile["abilities"]),
        f"Speech style: {profile['speech_style']}",
        f"Personality: {profile['personality']}",
        f"Experience and background: {profile['background']}",
        f"Ability and knowledge boundaries: {profile['knowledge_boundaries']}",
        "Speech examples:",
        *(f"- {e}" for e in examples if e),
    ]
    return "\n".join(lines)


def retrieval_text(profile: Mapping[str, Any]) -> str:
    """What a profile is embedded as for retrieval: who they are and what they know."""
    return " ".join(
        [profile["name"], profile["description"], "; ".join(profile["abilities"]), profile["knowledge_boundaries"]]
    )
