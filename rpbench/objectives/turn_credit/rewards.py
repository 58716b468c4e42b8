"""Turn rewards: one number per character turn of a session, from registered functions (``TURN_REWARDS``),
weighted and summed as ``env.turn_rewards`` says (``{name: weight}``; their options: ``env.turn_reward_options``).

Each function returns the raw measure of every turn, the weight carries its sign:

- ``judge_breaks``: 1 for a turn the session judge flagged as a break (its ``breaks``), else 0; needs the
  ``session_judge`` reward among ``env.rewards`` (its verdict is read, no second request);
- ``ooc_count``: how many out-of-character phrases (``ooc_phrases``) the turn holds;
- ``card_similarity``: the turn's cosine similarity to the character card (sentence embeddings, ``encoder``);
- ``drift_step``: that similarity's change from the turn before (0 on the first turn: no step yet);
- ``rm_prefix``, ``judge_rubric`` (``model_rewards``): a reward model's score of the turn after the session so
  far, and a judge's rubric score of the turn.

A value is None when the measure does not exist (no verdict; an empty reply has no embedding): the session then
has no turn rewards and is left out of its group (zero advantage), counted as ``train/turn_reward_missing``.
A new turn reward is one ``@TURN_REWARDS.register(name)`` function ``fn(sessions, options) -> values``, or a class
when it holds a model or a judge client: built once per run as ``cls(options, judge)`` (``judge``: the env's judge
client), then called as a function is; its ``close()``, if any, runs when training ends (``TurnRewardSet``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings
from rpbench.data.conversation_session import Session
from rpbench.scoring.persona import card_similarities, ooc_hits
from rpbench.scoring.sentence_encoder import load_sentence_encoder

TURN_REWARDS = Registry("turn reward")


@dataclass(frozen=True, kw_only=True)
class RewardModelOptions(Settings):
    """``env.reward_model``: a one-label sequence-classification model in a local folder (never downloaded)."""

    path: str | None
    batch_size: int
    dtype: str

    def problems(self) -> list[Problem]:
        found: list[Problem] = [] if self.batch_size >= 1 else [("batch_size", "an integer >= 1")]
        if self.dtype not in ("float32", "bfloat16", "float16"):
            found.append(("dtype", "float32, bfloat16 or float16"))
        return found


@dataclass(frozen=True, kw_only=True)
class TurnJudgeOptions(Settings):
    """``env.turn_reward_options.turn_judge``: the rubric the judge scores each character turn on (1-5 per
    dimension) and the length of its reply."""

    rubric: Mapping[str, str]
    max_tokens: int

    def problems(self) -> list[Problem]:
        found: list[Problem] = [] if self.max_tokens >= 1 else [("max_tokens", "an integer >= 1 (tokens)")]
        if not self.rubric or not all(str(q).strip() for q in self.rubric.values()):
            found.append(("rubric", "at least one dimension, each with what the judge is to look for"))
        return found


@dataclass(frozen=True, kw_only=True)
class TurnRewardOptions(Settings):
    """``env.turn_reward_options``: what the registered turn rewards read."""

    ooc_phrases: tuple[str, ...]  # ooc_count
    encoder: str | None  # card_similarity, drift_step (null: the packaged all-MiniLM-L6-v2)
    batch_size: int
    reward_model: RewardModelOptions  # rm_prefix (${env.reward_model})
    turn_judge: TurnJudgeOptions  # judge_rubric

    def problems(self) -> list[Problem]:
        return [("batch_size", "an integer >= 1")] if self.batch_size < 1 else []


@dataclass(frozen=True)
class JudgedSession:
    """A session and the turns (1-based) its session judge flagged; ``breaks`` None: no verdict."""

    session: Session
    breaks: frozenset[int] | None


TurnValues = list[list[float | None]]  # per session, one value per character turn
TurnRewardFn = Callable[[Sequence[JudgedSession], TurnRewardOptions], TurnValues]


@TURN_REWARDS.register("judge_breaks")
def judge_breaks(sessions: Sequence[JudgedSession], options: TurnRewardOptions) -> TurnValues:
    return [
        [None if s.breaks is None else float(t in s.breaks) for t in range(1, s.session.character_turns + 1)]
        for s in sessions
    ]


@TURN_REWARDS.register("ooc_count")
def ooc_count(sessions: Sequence[JudgedSession], options: TurnRewardOptions) -> TurnValues:
    return [[float(sum(ooc_hits(r, options.ooc_phrases).values())) for r in s.session.replies] for s in sessions]


@TURN_REWARDS.register("card_similarity")
def card_similarity(sessions: Sequence[JudgedSession], options: TurnRewardOptions) -> TurnValues:
    model = load_sentence_encoder(options.encoder, "env.turn_reward_options.encoder")[0]
    return [
        card_similarities(model, s.session.example.meta["card"], s.session.replies, options.batch_size)
        for s in sessions
    ]


@TURN_REWARDS.register("drift_step")
def drift_step(sessions: Sequence[JudgedSession], options: TurnRewardOptions) -> TurnValues:
    out: TurnValues = []
    for similarities in card_similarity(sessions, options):
        before = [similarities[0], *similarities[:-1]]  # turn 1 steps from itself: 0
        out.append([None if a is None or b is None else a - b for a, b in zip(similarities, before, strict=True)])
    return out


@dataclass(frozen=True)
class TurnRewards:
    """Every configured turn reward's values (``by_name``) and their weighted sum per turn (``combined``; None
    for a session missing any value)."""

    by_name: Mapping[str, TurnValues]
    combined: list[list[float] | None]


class TurnRewardSet:
    """The turn rewards of ``env.turn_rewards``, built once: a registered class as ``cls(options, judge)``."""

    def __init__(self, weights: Mapping[str, float], options: TurnRewardOptions, judge: Any):
        self.weights, self.options = dict(weights), options
        self.fns: dict[str, TurnRewardFn] = {}
        for name in self.weights:
            found = TURN_REWARDS.get(name)
            self.fns[name] = found(options, judge) if isinstance(found, type) else found

    def score(self, sessions: Sequence[JudgedSession]) -> TurnRewards:
        return score_turns(self.weights, sessions, self.options, self.fns)

    def close(self) -> None:
        for fn in self.fns.values():
            if callable(getattr(fn, "close", None)):
                fn.close()


def score_turns(
    weights: Mapping[str, float],
    sessions: Sequence[JudgedSession],
    options: TurnRewardOptions,
    fns: Mapping[str, TurnRewardFn],
) -> TurnRewards:
    """The turn rewards of ``sessions`` (``fns``: each named reward, built), weighted by ``weights``."""
    by_name: dict[str, TurnValues] = {}
    for name in weights:
        values = fns[name](sessions, options)
        for s, row in zip(sessions, values, strict=True):
            if len(row) != s.session.character_turns:
                raise ValueError(
                    f"turn reward {name!r} gave {len(row)} values for session {s.session.id!r} of "
                    f"{s.session.character_turns} character turns"
                )
        by_name[name] = values
    combined: list[list[float] | None] = []
    for k, s in enumerate(sessions):
        rows = [(weights[name], values[k]) for name, values in by_name.items()]
        missing = any(v is None for _, row in rows for v in row)
        turns = range(s.session.character_turns)
        combined.append(None if missing else [sum(w * row[t] for w, row in rows) for t in turns])
    return TurnRewards(by_name, combined)


def turn_reward_problems(weights: Mapping[str, float], reward_names: Sequence[str]) -> list[Problem]:
    """``env.turn_rewards`` checked: registered names, numeric weights, and what a turn reward needs."""
    found: list[Problem] = []
    for name, weight in weights.items():
        if name not in TURN_REWARDS.names():
            found.append((f"turn_rewards.{name}", f"a registered turn reward ({', '.join(TURN_REWARDS.names())})"))
        elif isinstance(weight, bool) or not isinstance(weight, (int, float)):
            found.append((f"turn_rewards.{name}", "a number (the weight)"))
    if "judge_breaks" in weights and "session_judge" not in reward_names:
        found.append(("turn_rewards.judge_breaks", "a session_judge among env.rewards (its verdict flags the breaks)"))
    return found
