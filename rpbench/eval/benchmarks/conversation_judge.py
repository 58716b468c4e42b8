"""Session-level judging of whole conversations (rpbench's wording): one request per session.

The judge sees the character card, the user's persona and goal and the whole conversation with the
character's turns numbered, and answers one JSON object: a score from 1 (poor) to 5 (excellent) for every
rubric dimension, and the character turns where the character broke (``breaks``: turn number and reason).
A reply without a valid score for every dimension is re-asked (``judge.parse_tries``), then counted as a
parse failure, never scored; a break naming a turn the session does not have is left out and counted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

SCALE = (1, 5)
JUDGE_PROMPT = """You are judging a role-play conversation. A model played the character {character}. A user \
({persona}) talked with it, wanting this: {goal}

Character card of {character}:
{card}

The conversation (the character's turns are numbered):
{conversation}

Judge only the character's side of the whole conversation. Score each dimension from 1 (poor) to 5 (excellent):
{dimensions}

Then list every character turn where the character broke: left the role, contradicted the card, or showed \
knowledge it could not have. Give each with its turn number and a short reason (an empty list if none).

Answer with one JSON object and nothing else, in this form:
{form}"""
REASK = "Answer now with the JSON object only: every dimension's score (1-5) and the list of breaks."


def transcript(session: Mapping[str, Any]) -> str:
    """The conversation as the judge reads it: user lines, and the character's lines as ``[Turn k]``."""
    lines, turn = [], 0
    for message in session["messages"]:
        if message["role"] == "user":
            lines.append(f"User: {message['text']}")
        else:
            turn += 1
            lines.append(f"[Turn {turn}] {session['character']}: {message['text']}")
    return "\n".join(lines)


def prompt_slots(session: Mapping[str, Any], rubric: Mapping[str, str]) -> dict[str, str]:
    """What every session-judging prompt states: the scenario and the rubric, one ``- name: question`` a line."""
    dimensions = "\n".join(f"- {name}: {question}" for name, question in rubric.items())
    return {key: session[key] for key in ("character", "persona", "goal", "card")} | {"dimensions": dimensions}


def judge_prompt(session: Mapping[str, Any], rubric: Mapping[str, str]) -> str:
    form = {"scores": {name: "<1-5>" for name in rubric}, "breaks": [{"turn": "<turn>", "reason": "<reason>"}]}
    return JUDGE_PROMPT.format(**prompt_slots(session, rubric), conversation=transcript(session), form=json.dumps(form))


def prompt_version(rubric: Mapping[str, str]) -> str:
    """The judge prompt's identity (part of the cache key): its template and rubric, hashed."""
    text = JUDGE_PROMPT + json.dumps(dict(rubric), sort_keys=True)
    return f"conversation-session-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def parse_verdict(text: str, dimensions: Sequence[str]) -> dict[str, Any] | None:
    """``{"scores": {dimension: 1-5}, "breaks": [{"turn": int, "reason": str}]}`` from the judge's reply (the
    outermost ``{...}`` in it), or None when any dimension lacks a whole score in range or breaks are malformed
    (no ``breaks`` key: no breaks)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        found = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    scores = found.get("scores") if isinstance(found, dict) else None
    if not isinstance(scores, dict):
        return None
    low, high = SCALE
    values = {d: scores.get(d) for d in dimensions}
    if any(isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high for v in values.values()):
        return None
    breaks = found.get("breaks", [])
    if not isinstance(breaks, list) or not all(
        isinstance(b, dict) and isinstance(b.get("turn"), int) and not isinstance(b["turn"], bool) for b in breaks
    ):
        return None
    return {"scores": values, "breaks": [{"turn": b["turn"], "reason": str(b.get("reason", ""))} for b in breaks]}


def judge_sessions(
    client: Any, sessions: Sequence[Mapping[str, Any]], rubric: Mapping[str, str], max_tokens: int
) -> list[dict[str, Any]]:
    """One judgement per session: ``{"id", "status", "scores", "breaks", "breaks_out_of_range", "reply",
    "attempts"}`` (scores None per dimension unless the reply parsed)."""
    from rpbench.scoring.judge import JudgeRequest

    version = prompt_version(rubric)
    requests = [
        JudgeRequest(({"role": "user", "content": judge_prompt(s, rubric)},), max_tokens, version) for s in sessions
    ]
    dimensions = list(rubric)
    replies = client.judge_parsed(
        requests, lambda text: parse_verdict(text, dimensions), REASK, desc="judge (conversation)"
    )
    out = []
    for session, reply in zip(sessions, replies):
        verdict = reply.value or {"scores": dict.fromkeys(dimensions), "breaks": []}
        n_turns = session["n_character_turns"]
        breaks = [b for b in verdict["breaks"] if 1 <= b["turn"] <= n_turns]
        out.append(
            {
                "id": session["id"],
                "status": reply.status,
                "scores": verdict["scores"],
                "breaks": breaks,
                "breaks_out_of_range": len(verdict["breaks"]) - len(breaks),
                "reply": reply.text,
                "attempts": reply.attempts,
            }
        )
    return out
