"""Turn rewards that ask a model (issue 41), each built once per run (``TurnRewardSet``):

- ``rm_prefix``: a reward model's score of each character turn, given the session before it (the character's
  system prompt first, then every user and character turn up to it), from ``env.reward_model``, a local
  one-label sequence-classification model (``rpbench.scoring.reward_model.RewardModelScorer``). A score that is
  not a finite number is None.
- ``judge_rubric``: the env's judge (``env.judge``, the client the env opened) scores each character turn on a
  short rubric (``env.turn_reward_options.turn_judge``), 1 (poor) to 5 (excellent) per dimension, the reply
  re-asked up to ``judge.parse_tries``; the turn's value is the mean score mapped to [0, 1]. A verdict the
  judge cannot give is None (never 0): its session then has no turn rewards and is left out of its group
  (``train/turn_reward_missing``), and the failed turns are counted in ``failures`` and logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.data.conversation_session import model_turns
from rpbench.data.records import as_messages
from rpbench.objectives.turn_credit.rewards import TURN_REWARDS, JudgedSession, TurnRewardOptions, TurnValues
from rpbench.scoring.chat.client import ChatRequest
from rpbench.scoring.judge.conversation import SCALE, session_score, transcript
from rpbench.scoring.judge.parse import outermost_object
from rpbench.scoring.reward_model import RewardModelScorer

log = logging.getLogger(__name__)

TURN_JUDGE_PROMPT = """You are judging one reply in a role-play conversation. A model plays the character \
{character}; a user ({persona}) talks with it.

Character card of {character}:
{card}

The conversation before the reply:
{conversation}

The reply to judge, turn {turn} of {character}:
{reply}

Judge this reply alone, in the light of the conversation before it. Score each dimension from 1 (poor) to 5 \
(excellent):
{dimensions}

Answer with one JSON object and nothing else, in this form:
{form}"""
TURN_JUDGE_REASK = "Answer now with the JSON object only: every dimension's score as a whole number from 1 to 5."


def turns_before(sessions: Sequence[JudgedSession]) -> tuple[list[list[dict[str, str]]], list[str], list[int]]:
    """Every character turn of the sessions: the chat messages before it (system prompt first), its text, and
    the index of its session."""
    conversations, replies, owner = [], [], []
    for k, judged in enumerate(sessions):
        turns = model_turns(judged.session)
        for i, turn in enumerate(turns):
            if turn.role == "assistant":
                conversations.append(as_messages(turns[:i]))
                replies.append(turn.content)
                owner.append(k)
    return conversations, replies, owner


def per_session(values: Sequence[float | None], owner: Sequence[int], n: int) -> TurnValues:
    out: TurnValues = [[] for _ in range(n)]
    for k, value in zip(owner, values, strict=True):
        out[k].append(value)
    return out


@TURN_REWARDS.register("rm_prefix")
class RewardModelTurns:
    """The reward model's score of each character turn after the session so far."""

    def __init__(self, options: TurnRewardOptions, judge: Any):
        rm = options.reward_model
        self.scorer = RewardModelScorer(str(rm.path), rm.batch_size, rm.dtype)

    def __call__(self, sessions: Sequence[JudgedSession], options: TurnRewardOptions) -> TurnValues:
        conversations, replies, owner = turns_before(sessions)
        scores = self.scorer.score(conversations, replies) if replies else []
        return per_session([v if math.isfinite(v) else None for v in scores], owner, len(sessions))


def turn_judge_prompt(judged: JudgedSession, turn: int, rubric: Mapping[str, str]) -> str:
    """The judge's request for character turn ``turn`` (1-based) of a session."""
    session = judged.session
    record = session.record()
    before, seen = [], 0
    for message in session.messages:
        if message["role"] == "character":
            seen += 1
            if seen == turn:
                break
        before.append(message)
    form = {name: "<1-5>" for name in rubric}
    return TURN_JUDGE_PROMPT.format(
        character=record["character"],
        persona=record["persona"],
        card=record["card"],
        conversation=transcript({"messages": before, "character": record["character"]}),
        turn=turn,
        reply=session.replies[turn - 1],
        dimensions="\n".join(f"- {name}: {question}" for name, question in rubric.items()),
        form=json.dumps(form),
    )


def parse_turn_scores(text: str, dimensions: Sequence[str]) -> dict[str, int] | None:
    """``{dimension: 1-5}`` from the outermost ``{...}`` of the judge's reply, or None when a dimension lacks a
    whole score in range."""
    found = outermost_object(text)
    if found is None:
        return None
    low, high = SCALE
    scores = {d: found.get(d) for d in dimensions}
    if any(isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high for v in scores.values()):
        return None
    return scores


@TURN_REWARDS.register("judge_rubric")
class JudgeRubricTurns:
    """The judge's rubric score of each character turn, in [0, 1]; None where it gives no verdict."""

    def __init__(self, options: TurnRewardOptions, judge: Any):
        self.client, self.failures = judge, 0
        rubric = dict(options.turn_judge.rubric)
        text = TURN_JUDGE_PROMPT + json.dumps(rubric, sort_keys=True)
        self.version = f"conversation-turn-{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    def __call__(self, sessions: Sequence[JudgedSession], options: TurnRewardOptions) -> TurnValues:
        rubric, max_tokens = dict(options.turn_judge.rubric), options.turn_judge.max_tokens
        requests, owner = [], []
        for k, judged in enumerate(sessions):
            for turn in range(1, judged.session.character_turns + 1):
                prompt = turn_judge_prompt(judged, turn, rubric)
                requests.append(ChatRequest(({"role": "user", "content": prompt},), max_tokens, self.version))
                owner.append(k)
        dimensions = list(rubric)
        replies = self.client.ask_parsed(
            requests, lambda text: parse_turn_scores(text, dimensions), TURN_JUDGE_REASK, desc="judge (turns)"
        )
        values = [session_score(r.value, None) if r.status == "ok" else None for r in replies]
        failed = sum(v is None for v in values)
        if failed:
            log.warning(
                "turn judge: %d of %d turns without a verdict; their sessions are left out of their groups",
                failed,
                len(values),
            )
        self.failures += failed
        return per_session(values, owner, len(sessions))
