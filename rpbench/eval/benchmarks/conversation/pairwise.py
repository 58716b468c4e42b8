"""Pairwise session judging (``evaluator.pairwise_with``): this run's sessions against another conversation
run's on the same scenarios, position-swapped (rpbench's wording).

For each shared scenario the judge sees both conversations twice, this run's first as "A" and then as "B",
and names per rubric dimension which character does better: ``A``, ``B`` or ``tie``. This run's outcome per
order is 1 (win), 0.5 (tie) or 0 (loss); a session's score per dimension is the mean of its two orders
(one order when the other could not be parsed; none when neither). Win rate = the mean over sessions, with a
bootstrap CI. ``position_inconsistent`` counts sessions whose two orders disagree once the swap is undone
(a judge that prefers a position rather than a conversation). A scenario whose session was cut short in either
run (``CUT_SHORT``), or that failed a simulator check in either run (``evaluator.simulator_checks``; the other
run's simulator_checks.jsonl), is not compared, and is counted (``cut_short``, ``failed_checks``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.conversation_session import CUT_SHORT
from rpbench.data.jsonl import object_lines
from rpbench.eval.stats import summarize
from rpbench.scoring.judge.conversation import prompt_slots, transcript
from rpbench.scoring.judge.parse import outermost_object

SCENARIO_FIELDS = ("character", "card", "persona", "goal")
CHOICES = ("A", "B", "tie")
OUTCOME = {"this": 1.0, "tie": 0.5, "other": 0.0}
PAIRWISE_PROMPT = """You are comparing two role-play conversations from the same scenario. In both, a model \
played the character {character}, and a user ({persona}) talked with it, wanting this: {goal}

Character card of {character}:
{card}

Conversation A:
{first}

Conversation B:
{second}

For each dimension below, say which conversation's character does better: "A", "B", or "tie".
{dimensions}

Answer with one JSON object and nothing else, in this form:
{form}"""
REASK = 'Answer now with the JSON object only: "A", "B" or "tie" for every dimension.'


def read_sessions(folder: str) -> dict[str, Mapping[str, Any]]:
    """A conversation run's sessions (its conversations.jsonl) by id, each with what pairwise judging reads: a
    bad line is an error naming the file, the line and the field."""
    path = Path(folder) / "conversations.jsonl"
    sessions: dict[str, Mapping[str, Any]] = {}
    for number, row in object_lines(path):
        for name in ("id", *SCENARIO_FIELDS, "ended_by"):
            if not isinstance(row.get(name), str):
                raise DataFormatError(path, f"line {number}", name, "a string")
        messages = row.get("messages")
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and m.get("role") in ("user", "character") and isinstance(m.get("text"), str)
            for m in messages
        ):
            raise DataFormatError(path, f"line {number}", "messages", 'a list of {"role": user|character, "text"}')
        if row["id"] in sessions:
            raise DataFormatError(path, f"line {number}", "id", f"one session per id ({row['id']!r} is repeated)")
        sessions[row["id"]] = row
    if not sessions:
        raise DataFormatError(path, "(file)", "(lines)", "at least one session")
    return sessions


def scenario_problems(folder: str, scenarios: Sequence[Mapping[str, Any]]) -> list[str]:
    """What keeps the other run's sessions from being compared with these ``scenarios`` (``id`` and the
    ``SCENARIO_FIELDS``): no shared id, or a shared scenario whose card, persona or goal differs."""
    other = read_sessions(folder)
    if not any(s["id"] in other for s in scenarios):
        return [
            f"evaluator.pairwise_with={folder}: its conversations.jsonl shares no scenario id with this run's test "
            f"records (it has {', '.join(list(other)[:3])}{', ...' if len(other) > 3 else ''})"
        ]
    try:
        read_other(folder, scenarios)
    except DataFormatError as error:
        return [f"evaluator.pairwise_with: {error}"]
    return []


def read_other(folder: str, sessions: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The other run's sessions by id, for the scenarios both runs hold; a shared scenario whose card,
    persona or goal differs is an error naming the file, the session and the field."""
    path = Path(folder) / "conversations.jsonl"
    other = read_sessions(folder)
    for session in sessions:
        theirs = other.get(session["id"])
        for field in SCENARIO_FIELDS if theirs is not None else ():
            if theirs[field] != session[field]:
                raise DataFormatError(path, session["id"], field, "the same scenario as this run's (it differs)")
    return {s["id"]: other[s["id"]] for s in sessions if s["id"] in other}


def failed_check_ids(folder: str) -> set[str]:
    """The sessions of a conversation run that failed a simulator check (its simulator_checks.jsonl; none when the
    run wrote none, as runs made before the checks did not); a bad line is an error naming the file, line, field."""
    path = Path(folder) / "simulator_checks.jsonl"
    if not path.is_file():
        return set()
    failed = set()
    for number, row in object_lines(path):
        if not isinstance(row.get("id"), str):
            raise DataFormatError(path, f"line {number}", "id", "a string")
        if not isinstance(row.get("failed"), list):
            raise DataFormatError(path, f"line {number}", "failed", "a list of the checks the session failed")
        if row["failed"]:
            failed.add(row["id"])
    return failed


def parse_choices(text: str, dimensions: Sequence[str]) -> dict[str, str] | None:
    found = outermost_object(text)
    if found is None:
        return None
    choices = {d: str(found.get(d, "")).strip() for d in dimensions}
    normalised = {d: "tie" if c.lower() == "tie" else c.upper() for d, c in choices.items()}
    return normalised if all(c in CHOICES for c in normalised.values()) else None


def pairwise_prompt(
    this: Mapping[str, Any], first: Mapping[str, Any], second: Mapping[str, Any], rubric: Mapping[str, str]
) -> str:
    return PAIRWISE_PROMPT.format(
        **prompt_slots(this, rubric),
        first=transcript(first),
        second=transcript(second),
        form=json.dumps(dict.fromkeys(rubric, "A|B|tie")),
    )


def outcome(choice: str, this_first: bool) -> str:
    if choice == "tie":
        return "tie"
    return "this" if (choice == "A") == this_first else "other"


def judge_pairwise(
    client: Any,
    sessions: Sequence[Mapping[str, Any]],
    other: Mapping[str, Mapping[str, Any]],
    rubric: Mapping[str, str],
    max_tokens: int,
    bootstrap: Mapping[str, Any],
    failed_checks: Collection[str],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The win rates per dimension (results) and every judgement (for pairwise.jsonl). A session cut short in
    either run, or whose id is in ``failed_checks`` (a simulator check failed in either run), is not compared."""
    from rpbench.scoring.chat import ChatRequest

    text = PAIRWISE_PROMPT + json.dumps(dict(rubric), sort_keys=True)
    version = f"conversation-pairwise-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    dimensions = list(rubric)
    shared = [s for s in sessions if s["id"] in other]
    whole = [s for s in shared if s["ended_by"] not in CUT_SHORT and other[s["id"]]["ended_by"] not in CUT_SHORT]
    checked = [s for s in whole if s["id"] not in failed_checks]
    asks = [(s, this_first) for s in checked for this_first in (True, False)]
    requests = []
    for s, this_first in asks:
        first, second = (s, other[s["id"]]) if this_first else (other[s["id"]], s)
        content = pairwise_prompt(s, first, second, rubric)
        requests.append(ChatRequest(({"role": "user", "content": content},), max_tokens, version))
    replies = client.ask_parsed(
        requests, lambda t: parse_choices(t, dimensions), REASK, desc="judge (conversation, pairwise)"
    )
    judgements, per_session = [], {}
    for (s, this_first), reply in zip(asks, replies):
        outcomes = {d: outcome(c, this_first) for d, c in reply.value.items()} if reply.value else None
        judgements.append(
            {"id": s["id"], "this_first": this_first, "status": reply.status, "outcomes": outcomes, "reply": reply.text}
        )
        per_session.setdefault(s["id"], []).append(outcomes)
    results: dict[str, Any] = {
        "shared_sessions": len(per_session),
        "cut_short": len(shared) - len(whole),  # cut short in this run or the other: not compared
        "failed_checks": len(whole) - len(checked),  # a simulator check failed in this run or the other: neither
        "parse_failures": sum(j["status"] == "parse_failure" for j in judgements),
        "request_failures": sum(j["status"] == "request_failure" for j in judgements),
        "dimensions": {},
    }
    for d in dimensions:
        scores, inconsistent = [], 0
        for orders in per_session.values():
            seen = [o[d] for o in orders if o is not None]
            scores.append(sum(OUTCOME[x] for x in seen) / len(seen) if seen else None)
            inconsistent += len(seen) == 2 and seen[0] != seen[1]
        results["dimensions"][d] = {**summarize(scores, **bootstrap), "position_inconsistent": inconsistent}
    return results, judgements
