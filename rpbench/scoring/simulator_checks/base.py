"""The simulator-check registry, its thresholds and what a check returns.

A check is a function ``fn(session, settings, embed) -> Checked`` registered with ``simulator_check(name,
needs_encoder)``: ``session`` is a session record (``Session.record()``: character, card, persona, goal,
messages, n_character_turns, turn_limit, ended_by), ``settings`` the ``SimulatorCheckSettings``, ``embed``
the texts' unit sentence embeddings (only for checks that need the encoder; None otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings

Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Checked:
    """One check of one session: the measured ``value`` (None: the check does not apply), whether the
    session ``failed`` it, and what was found (``detail``: turns and per-turn values)."""

    value: float | None
    failed: bool
    detail: Mapping[str, Any]


@dataclass(frozen=True)
class SimulatorCheck:
    fn: Callable[..., Checked]
    needs_encoder: bool


SIMULATOR_CHECKS = Registry("simulator check")


def simulator_check(name: str, *, needs_encoder: bool) -> Callable[[Callable[..., Checked]], Callable[..., Checked]]:
    """Registers a check function under ``name`` (``needs_encoder``: it is handed ``embed``)."""

    def decorator(fn: Callable[..., Checked]) -> Callable[..., Checked]:
        SIMULATOR_CHECKS.register(name)(SimulatorCheck(fn, needs_encoder))
        return fn

    return decorator


@dataclass(frozen=True, kw_only=True)
class RoleReversal(Settings):
    margin: float | None  # cos(turn, card) - cos(turn, persona) at which a turn reads as the character's; null: off


@dataclass(frozen=True, kw_only=True)
class PersonaAdherence(Settings):
    min_mean: float  # a session's mean cos(turn, persona + goal) below this fails
    min_slope: float  # ... or its least-squares slope per user turn below this (with slope_min_turns turns or more)
    slope_min_turns: int

    def problems(self) -> list[Problem]:
        return [] if self.slope_min_turns >= 2 else [("slope_min_turns", "an integer >= 2 (a slope needs two points)")]


@dataclass(frozen=True, kw_only=True)
class EarlyStop(Settings):
    min_turns: int  # the stop marker before this many character turns (or the scenario's limit, if lower) fails

    def problems(self) -> list[Problem]:
        return [] if self.min_turns >= 1 else [("min_turns", "an integer >= 1")]


@dataclass(frozen=True, kw_only=True)
class Repetition(Settings):
    min_jaccard: float  # two user turns whose word sets overlap this much (Jaccard) are near-duplicates

    def problems(self) -> list[Problem]:
        return [] if 0 < self.min_jaccard <= 1 else [("min_jaccard", "a share in (0, 1]")]


@dataclass(frozen=True, kw_only=True)
class GoalLeak(Settings):
    min_words: int  # the goal's words copied in a row into a user turn, from this many on, fail

    def problems(self) -> list[Problem]:
        return [] if self.min_words >= 2 else [("min_words", "an integer >= 2")]


@dataclass(frozen=True, kw_only=True)
class SimulatorCheckSettings(Settings):
    """``simulator_check`` (conf/evaluator/common/conversation_session.yaml): the encoder and every threshold."""

    encoder: str | None  # a local sentence-transformers folder or cached name; null: the packaged all-MiniLM-L6-v2
    batch_size: int
    role_reversal: RoleReversal
    persona_adherence: PersonaAdherence
    early_stop: EarlyStop
    repetition: Repetition
    goal_leak: GoalLeak

    def problems(self) -> list[Problem]:
        return [] if self.batch_size >= 1 else [("batch_size", "an integer >= 1")]


def check_name_problems(names: Sequence[str], key: str) -> list[Problem]:
    """``key`` (a list of enabled checks) names registered checks, each once."""
    known = SIMULATOR_CHECKS.names()
    if any(n not in known for n in names) or len(set(names)) != len(names):
        return [(key, f"registered simulator checks, each once: any of {', '.join(known)} (got {list(names)})")]
    return []


def simulated_turns(session: Mapping[str, Any]) -> list[str]:
    """The user turns the simulator wrote: every user message but the first (the scenario's opening)."""
    users = [m["text"] for m in session["messages"] if m["role"] == "user"]
    return users[1:]
