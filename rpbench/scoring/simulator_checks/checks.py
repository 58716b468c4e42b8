"""The registered simulator checks (experiments/conversations/README.md, "Checked simulators", gives each rule
and what it cannot catch). Each measures a session record without a judge; turn k is the simulator's k-th user
turn (the scenario's opening is not the simulator's and is not checked, but a repeat of it is)."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from typing import Any

import numpy as np

from rpbench.data.conversation_session import USER_CUE
from rpbench.scoring.sentence_encoder import slope
from rpbench.scoring.simulator_checks.base import (
    Checked,
    Embed,
    SimulatorCheckSettings,
    simulated_turns,
    simulator_check,
)
from rpbench.scoring.simulator_checks.text import (
    claims_name,
    embedded_user_cue,
    jaccard,
    longest_shared_run,
    names_of,
    speaker_tag,
    words,
)


def user_side(session: Mapping[str, Any]) -> str:
    """What the simulated user is given to be: its persona and its goal."""
    return f"{session['persona']} {session['goal']}"


@simulator_check("role_reversal", needs_encoder=True)
def role_reversal(session: Mapping[str, Any], settings: SimulatorCheckSettings, embed: Embed) -> Checked:
    """User turns written as the character: a line opening with the character's name and a colon, a claim of
    its name in the first person, or (``margin`` set) a turn closer to the card than to the persona by
    ``margin`` or more. Value: how many turns; fails from one."""
    turns, margin = simulated_turns(session), settings.role_reversal.margin
    names = names_of(session["character"])
    margins: list[float | None] = [None] * len(turns)
    kept = [i for i, t in enumerate(turns) if words(t)]
    if margin is not None and kept:
        vectors = embed([session["card"], session["persona"], *(turns[i] for i in kept)])
        for i, v in zip(kept, vectors[2:]):
            margins[i] = float(np.dot(vectors[0], v) - np.dot(vectors[1], v))
    found = []
    for k, (text, m) in enumerate(zip(turns, margins), start=1):
        reasons = [
            reason
            for reason, hit in (
                ("speaker_tag", speaker_tag(text, names)),
                ("claims_name", claims_name(text, names)),
                ("closer_to_card", m is not None and margin is not None and m >= margin),
            )
            if hit
        ]
        if reasons:
            found.append({"turn": k, "reasons": reasons, "margin": m})
    known = [m for m in margins if m is not None]
    detail = {"turns": found, "max_margin": max(known) if known else None}
    return Checked(float(len(found)) if turns else None, bool(found), detail)


@simulator_check("persona_adherence", needs_encoder=True)
def persona_adherence(session: Mapping[str, Any], settings: SimulatorCheckSettings, embed: Embed) -> Checked:
    """Each user turn's cosine similarity to the persona and goal, their mean (the value) and least-squares slope
    over turns. Fails when the mean is below ``min_mean``, or (with ``slope_min_turns`` turns or more) the slope
    below ``min_slope``."""
    rule = settings.persona_adherence
    turns = [(k, t) for k, t in enumerate(simulated_turns(session), start=1) if words(t)]
    if not turns:
        return Checked(None, False, {"similarity": [], "slope": None})
    vectors = embed([user_side(session), *(t for _, t in turns)])
    similarity = [float(np.dot(vectors[0], v)) for v in vectors[1:]]
    mean = float(np.mean(similarity))
    trend = slope([k for k, _ in turns], similarity)
    drifting = trend is not None and len(turns) >= rule.slope_min_turns and trend < rule.min_slope
    detail = {"similarity": similarity, "slope": trend, "turns": [k for k, _ in turns]}
    return Checked(mean, mean < rule.min_mean or drifting, detail)


@simulator_check("early_stop", needs_encoder=False)
def early_stop(session: Mapping[str, Any], settings: SimulatorCheckSettings, embed: Embed | None) -> Checked:
    """The simulator's stop marker before ``min_turns`` character turns (or the scenario's own limit, if lower).
    Value: 1 for a session the simulator ended early, else 0."""
    enough = min(settings.early_stop.min_turns, session["turn_limit"])
    turns = session["n_character_turns"]
    early = session["ended_by"] == "simulator" and turns < enough
    return Checked(float(early), early, {"character_turns": turns, "needed": enough})


@simulator_check("repetition", needs_encoder=False)
def repetition(session: Mapping[str, Any], settings: SimulatorCheckSettings, embed: Embed | None) -> Checked:
    """Empty user turns (no word) and near-duplicates: two user turns (the opening included) whose word sets
    overlap by ``min_jaccard`` or more. Value: the highest overlap of a simulated turn with another user turn."""
    users = [m["text"] for m in session["messages"] if m["role"] == "user"]
    empty = [k for k, t in enumerate(users[1:], start=1) if not words(t)]
    pairs = [(a, b, jaccard(users[a], users[b])) for a, b in combinations(range(len(users)), 2) if words(users[b])]
    worst = max(pairs, key=lambda p: p[2], default=None)
    repeated = [(a, b) for a, b, j in pairs if j >= settings.repetition.min_jaccard]
    detail = {"empty_turns": empty, "repeated_pairs": repeated}  # turn 0: the opening
    return Checked(worst[2] if worst else None, bool(empty or repeated), detail)


@simulator_check("goal_leak", needs_encoder=False)
def goal_leak(session: Mapping[str, Any], settings: SimulatorCheckSettings, embed: Embed | None) -> Checked:
    """The scenario's goal (told to the simulator, hidden from the character) copied into a user turn: the
    longest run of the goal's words a turn repeats (the value); fails from ``min_words``."""
    goal = words(session["goal"])
    if not goal:
        return Checked(None, False, {})
    runs = [longest_shared_run(goal, words(t)) for t in simulated_turns(session)]
    if not runs:
        return Checked(None, False, {})
    leaked = [k for k, n in enumerate(runs, start=1) if n >= settings.goal_leak.min_words]
    return Checked(float(max(runs)), bool(leaked), {"turns": leaked, "runs": runs})


@simulator_check("double_user_turn", needs_encoder=False)
def double_user_turn(session: Mapping[str, Any], settings: SimulatorCheckSettings, embed: Embed | None) -> Checked:
    """Two user turns in a row: consecutive user messages in the transcript, or a user turn holding a further
    ``User:`` line (several turns written as one). Value: how many; fails from one."""
    messages = session["messages"]
    adjacent = [i for i in range(1, len(messages)) if messages[i]["role"] == messages[i - 1]["role"] == "user"]
    embedded = [i for i, m in enumerate(messages) if m["role"] == "user" and embedded_user_cue(m["text"], USER_CUE)]
    found = len(adjacent) + len(embedded)
    return Checked(float(found), bool(found), {"adjacent_at": adjacent, "embedded_at": embedded})
