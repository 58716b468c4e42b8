"""Whole conversations with an LLM (rpbench's wording): the user simulator's client and requests, and
session-level judging, one request per session (``evaluator=conversation`` and ``env=conversation``).

The judge sees the character card, the user's persona and goal and the whole conversation with the
character's turns numbered, and answers one JSON object: a score from 1 (poor) to 5 (excellent) for every
rubric dimension, and the character turns where the character broke (``breaks``: turn number and reason).
A reply without a valid score for every dimension is re-asked (``judge.parse_tries``), then counted as a
parse failure, never scored; a break naming a turn the session does not have is left out and counted.
``session_score`` turns a session's scores into one number in [0, 1] (a reward).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.core.typed import Problem, Settings
from rpbench.data.conversation_session import SIMULATOR_PROMPT, Session, simulator_prompt
from rpbench.scoring.chat.client import (
    LOCAL_ENDPOINT,
    ChatClient,
    ChatRequest,
    ChatResult,
    LocalServer,
    LocalServerSettings,
    new_client,
)
from rpbench.scoring.chat.endpoints import api_key
from rpbench.scoring.judge.parse import outermost_object

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


@dataclass(frozen=True, kw_only=True)
class Simulator(Settings):
    """The user simulator: a model served for the run, another endpoint, or (all null) the judge's; its own
    sampling. (Whether ``server`` names a conf/model entry is checked where the model entries are known.)"""

    server: str | None  # a conf/model entry served by rpbench.serve on 127.0.0.1 for this run
    base_url: str | None
    model: str | None
    api_key_env: str | None
    temperature: float
    max_tokens: int
    stop_marker: str
    seed: int | None  # sent with each request (an endpoint that honours it samples reproducibly); null: none

    def problems(self) -> list[Problem]:
        found = [] if self.temperature >= 0 else [("temperature", "a number >= 0")]
        found += [] if self.max_tokens >= 1 else [("max_tokens", "an integer >= 1")]
        found += [] if self.stop_marker.strip() else [("stop_marker", "a non-empty marker")]
        if (self.base_url is None) != (self.model is None):
            found.append(("model", "set together with base_url (both null: the judge's endpoint and model)"))
        if self.server is not None and self.base_url is not None:
            found.append(("server", "null when base_url is set (one simulator: a served conf/model or an endpoint)"))
        return found


def simulator_key_problems(sim: Simulator, where: str) -> list[str]:
    """The key of the simulator's own endpoint (``base_url``), when it needs one; checked at startup as the
    judge's is (a served simulator needs none; without base_url the judge's endpoint and key play the user)."""
    if sim.server is not None or sim.base_url is None:
        return []
    try:
        api_key(sim.base_url, sim.api_key_env, f"{where}.api_key_env")
    except ConfigError as error:
        return [f"{error} (or {where}.base_url=null: the judge's endpoint plays the user)"]
    return []


@contextmanager
def open_simulator(
    judge: ChatClient, sim: Simulator, local_server: LocalServer | None, where: str
) -> Iterator[ChatClient]:
    """The user simulator's client, ``sim``'s sampling: a server of ``sim.server`` started on 127.0.0.1 (by
    ``local_server``, as ``judge=local``'s), ``sim.base_url``'s endpoint, or the judge's endpoint and model;
    closed (and the server stopped) on exit. ``where``: the settings' key, for errors."""
    config = replace(judge.config, temperature=sim.temperature, top_p=None)
    with ExitStack() as stack:
        if sim.server is not None:
            if local_server is None:
                raise ConfigError(f"{where}.server: no local server was handed in (the pipeline hands it)")
            served = replace(config, backend="local", server=LocalServerSettings.parse({"model": sim.server}, where))
            server = stack.enter_context(local_server(served))
            free = {"price_input_per_1m": 0.0, "price_output_per_1m": 0.0}  # served here: it costs nothing
            local = replace(config, base_url=server.base_url, model=server.model, api_key_env=None, **free)
            client = ChatClient(local, LOCAL_ENDPOINT, role="simulator")
        elif sim.base_url is None:
            client = new_client(config, judge.endpoint, role="simulator")
        else:
            own = replace(config, base_url=sim.base_url, model=sim.model, api_key_env=sim.api_key_env)
            client = ChatClient(own, label=where, role="simulator")
        stack.callback(client.close)  # before the server stops
        yield client


def simulator_version() -> str:
    return f"conversation-simulator-{hashlib.sha256(SIMULATOR_PROMPT.encode()).hexdigest()[:12]}"


def ask_simulator(
    simulator: ChatClient,
    sessions: Sequence[Session],
    turn: int,
    stop_marker: str,
    max_tokens: int,
    version: str,
    seed: int | None = None,
) -> list[ChatResult]:
    """The simulator's reply to each session after the character's ``turn``-th, in one batch; ``seed`` (not None)
    is sent with each request, beside the client's sampling (and so keys its cached replies)."""
    sampling = None
    if seed is not None:
        top_p = {} if simulator.config.top_p is None else {"top_p": simulator.config.top_p}
        sampling = {"temperature": simulator.config.temperature, **top_p, "seed": seed}
    requests = [
        ChatRequest(({"role": "user", "content": simulator_prompt(s, stop_marker)},), max_tokens, version, sampling)
        for s in sessions
    ]
    return simulator.ask_many(requests, desc=f"user simulator, turn {turn}") if requests else []


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
    found = outermost_object(text)
    scores = found.get("scores") if found is not None else None
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
    version = prompt_version(rubric)
    requests = [
        ChatRequest(({"role": "user", "content": judge_prompt(s, rubric)},), max_tokens, version) for s in sessions
    ]
    dimensions = list(rubric)
    replies = client.ask_parsed(
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


def session_score(scores: Mapping[str, int | None], weights: Mapping[str, float] | None) -> float | None:
    """A session's scores as one number in [0, 1]: their mean (or ``weights``-weighted mean) mapped from the
    1-5 scale; None when a weighted dimension has no score."""
    weights = weights or dict.fromkeys(scores, 1.0)
    if any(scores.get(d) is None for d in weights):
        return None
    low, high = SCALE
    mean = sum(w * scores[d] for d, w in weights.items()) / sum(weights.values())
    return (mean - low) / (high - low)
