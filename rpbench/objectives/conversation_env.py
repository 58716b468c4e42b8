"""``env=conversation``: GRPO rollouts that are whole sessions with a simulated user (issue 26).

Each training record is a scenario (``rpbench.data.conversation``); a rollout plays G sessions of it
(``objective.num_generations``), all sessions of a micro-batch advancing one turn at a time: one batched
``generate`` call writes every live session's character turn (sampled), then one batch of requests to the user
simulator (``rpbench.scoring.judge.conversation``) writes the next user turns. A session ends at its turn limit,
on the simulator's stop marker or error (``rpbench.data.conversation_session``), or when another turn would not
fit ``data.max_length`` (``length``).

The whole session is one token sequence, built from the tokens the policy actually sampled: after each character
turn come the end-of-turn tokens when the turn did not close with them, then the user's turn and the character's
header exactly as the chat template renders them after that reply (``user_turn_ids``). The policy's own tokens
(every character turn) are in the loss; the scenario prompt, the user turns and the template's tokens are not
(``Rollouts.policy_mask``). A session's reward is the weighted sum of ``env.rewards``: ``session_judge``
(one judge request per session) or any registered reward, scored per character turn and averaged. A session
cut short (the simulator's error, or ``length``), failing a simulator check (``env.simulator_checks``,
``rpbench.scoring.simulator_checks``) or without a verdict gets no reward: GRPO gives it zero
advantage and leaves it out of its group (``group_advantages``).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar

import torch

from rpbench.core.typed import Problem, Settings
from rpbench.data.chat import ChatRenderer, TemplateError
from rpbench.data.conversation_session import Session, model_turns
from rpbench.data.records import EvalExample, Turn, as_messages
from rpbench.models.generation import GenerationSettings, decode_completion
from rpbench.objectives.sampling import Rollouts, generate_rows
from rpbench.objectives.turn_credit.rewards import (
    JudgedSession,
    RewardModelOptions,
    TurnRewardOptions,
    TurnRewards,
    TurnRewardSet,
    turn_reward_problems,
)
from rpbench.scoring.chat.client import ClientOpener, EndpointSettings, NoJudge
from rpbench.scoring.judge.conversation import (
    Simulator,
    ask_simulator,
    judge_sessions,
    open_simulator,
    session_score,
    simulator_version,
)
from rpbench.scoring.judge.parties import Overlap, judge_party, overlaps, simulator_party
from rpbench.scoring.rewards import (
    REWARDS,
    RewardFn,
    build_reward_fns,
    read_entries,
    reply_length_problems,
    score_rewards,
)
from rpbench.scoring.simulator_checks.base import SIMULATOR_CHECKS, SimulatorCheckSettings, check_name_problems
from rpbench.scoring.simulator_checks.run import check_sessions

log = logging.getLogger(__name__)

ENDINGS = ("turn_limit", "simulator", "simulator_error", "length")  # why a session ended (Session.ended_by)


@dataclass(frozen=True, kw_only=True)
class ConversationEnvSettings(Settings):
    """conf/env/conversation.yaml (the session settings from conf/evaluator/common/conversation_session.yaml)."""

    name: str
    max_turns: int
    simulator: Simulator
    rubric: Mapping[str, str]
    judge: EndpointSettings | NoJudge  # the session judge (${judge}); its endpoint plays the user unless simulator's
    rewards: tuple[Mapping[str, Any], ...]  # entries of the reward registry (rpbench.scoring.rewards.read_entries)
    allow_shared_judge: bool  # one model as the user simulator and a judge of the rewards
    simulator_checks: tuple[str, ...]  # the enabled checks: a session failing one gets no reward
    simulator_check: SimulatorCheckSettings
    turn_rewards: Mapping[str, float]  # turn reward -> weight (rpbench.objectives.turn_credit.rewards); {}: none
    turn_reward_options: TurnRewardOptions
    reward_model: RewardModelOptions  # rm_prefix and session_reward_model read it (a local folder)

    def problems(self) -> list[Problem]:
        found: list[Problem] = check_name_problems(self.simulator_checks, "simulator_checks")
        if self.max_turns < 1:
            found.append(("max_turns", "an integer >= 1 (the cap on every scenario's turns)"))
        if not self.rubric or not all(q.strip() for q in self.rubric.values()):
            found.append(("rubric", "at least one dimension, each with what the judge is to look for"))
        if self.simulator.server is not None:
            found.append(("simulator.server", "null: the judge's endpoint (or simulator.base_url) plays the user"))
        if isinstance(self.judge, NoJudge):
            found.append(("judge", "a judge to play the user (judge=local|openai|vllm), not judge=none"))
        if not self.rewards:
            found.append(("rewards", "at least one reward of a session"))
        names = [entry.get("name") for entry in self.rewards if isinstance(entry, Mapping)]
        path = self.reward_model.path
        if "rm_prefix" in self.turn_rewards and not (path and Path(path).is_dir()):
            found.append(("reward_model.path", "the local folder of a one-label sequence-classification model"))
        return found + turn_reward_problems(self.turn_rewards, names)

    def overlaps(self) -> list[Overlap]:
        """The user simulator and a judge of the rewards played by one model (allowed by
        ``env.allow_shared_judge``). Read once the rewards are checked (``reward_problems``)."""
        if isinstance(self.judge, NoJudge):
            return []
        user = simulator_party(self.simulator, self.judge, "the user simulator (env.simulator)")
        judges = [
            judge_party(entry.kwargs["judge"], f"the reward judge (env.rewards[{i}].kwargs.judge)")
            for i, entry in enumerate(read_entries(self.rewards, "env.rewards"))
            if isinstance(entry.kwargs.get("judge"), EndpointSettings)
        ]
        if "judge_rubric" in self.turn_rewards:
            judges.append(judge_party(self.judge, "the turn judge (env.judge, env.turn_rewards.judge_rubric)"))
        return overlaps([(user, judge) for judge in judges], "env.allow_shared_judge", self.allow_shared_judge)


@REWARDS.register("session_judge")
class SessionJudgeReward:
    """The session judge's verdict on the rubric as one number in [0, 1] per session (``session_score``).

    Called with the sessions' records (``Session.record``) as ``prompts``; the judge replies with at most
    ``max_tokens`` tokens (every dimension's score and the flagged turns). A verdict the judge cannot give
    (unparseable after ``judge.parse_tries``, or a failed request) is None, no score: the session is left out
    of its group (zero advantage, not in the group's mean or std), and counted in ``failures`` (GRPO logs them).
    """

    opens_judge: ClassVar[bool] = True
    scores_sessions: ClassVar[bool] = True

    @staticmethod
    def kwargs_problems(kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
        rubric, weights = kwargs["rubric"], kwargs["weights"]
        found = reply_length_problems(kwargs["max_tokens"])
        if weights is None or not isinstance(rubric, Mapping):
            return found
        if not isinstance(weights, Mapping) or set(weights) - set(rubric):
            return [*found, ("weights", f"null or weights of rubric dimensions ({', '.join(rubric)})")]
        values = list(weights.values())
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in values) or not sum(
            values
        ):
            found.append(("weights", "weights >= 0 with a positive sum"))
        return found

    def __init__(
        self,
        judge: EndpointSettings,
        rubric: Mapping[str, str],
        weights: Mapping[str, float] | None,
        max_tokens: int,
        *,
        opener: ClientOpener,
    ):
        self.rubric, self.weights, self.max_tokens = dict(rubric), dict(weights) if weights else None, max_tokens
        self.failures = 0
        self.last_breaks: list[frozenset[int] | None] = []  # the last call's flagged turns (None: no verdict)
        self._stack = ExitStack()
        self.client = self._stack.enter_context(opener(judge))

    def __call__(self, prompts, completions, references) -> list[float | None]:
        judged = judge_sessions(self.client, prompts, self.rubric, self.max_tokens)
        scores = [session_score(j["scores"], self.weights) if j["status"] == "ok" else None for j in judged]
        self.last_breaks = [
            frozenset(b["turn"] for b in j["breaks"]) if score is not None else None
            for j, score in zip(judged, scores, strict=True)
        ]
        failed = sum(s is None for s in scores)
        if failed:
            log.warning(
                "session judge: %d of %d sessions without a verdict, left out of their groups (zero advantage)",
                failed,
                len(scores),
            )
        self.failures += failed
        return scores

    def close(self) -> None:
        self._stack.close()


def scenario_of(values: Mapping[str, Any]) -> EvalExample:
    """A scenario record from its plain form in a batch (``dataclasses.asdict``)."""
    prompt = tuple(Turn(**turn) for turn in values["prompt"])
    return EvalExample(values["id"], prompt, values["reference"], values["task"], dict(values["meta"]))


def user_turn_ids(renderer: ChatRenderer, turns: Sequence[Turn]) -> list[int]:
    """The tokens that follow the character's last reply and its end of turn when ``turns`` end on a user
    message: the template's text after that reply, the user's turn and the character's header, tokenized as
    ``render_prompt`` tokenizes them."""
    pieces = renderer.pieces(renderer.content.escape_turns(turns))
    before = [i for text, _ in pieces[:-1] for i in renderer.content.encode(text)]
    ids = renderer.render_prompt(turns, max_length=sys.maxsize)
    if ids[: len(before)] != before:
        raise TemplateError("env=conversation needs a prefix-stable chat template (set model.chat_template)")
    return ids[len(before) :]


@dataclass
class PlayedSession:
    """A session and its token sequence after the scenario prompt; ``policy[k]``: token k is the policy's own."""

    session: Session
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    policy: list[bool] = field(default_factory=list)
    turn: list[int] = field(default_factory=list)  # token k's character turn (0-based), -1 if not the policy's
    truncated: bool = False  # a character turn hit max_completion_length

    def add(self, ids: Sequence[int], own: bool) -> None:
        """Tokens after the sequence so far; ``own``: the policy wrote them, in its current turn."""
        self.ids += ids
        self.policy += [own] * len(ids)
        self.turn += [self.session.character_turns if own else -1] * len(ids)


class ConversationEnv:
    """Plays and scores the sessions of a micro-batch of scenarios (see the module's docstring)."""

    def __init__(self, settings: ConversationEnvSettings, judges: ClientOpener, renderer: ChatRenderer):
        self.settings, self.renderer = settings, renderer
        self._stack = ExitStack()
        config = settings.judge
        judge = self._stack.enter_context(judges(config))
        self.simulator = self._stack.enter_context(open_simulator(judge, settings.simulator, None, "env.simulator"))
        # the session judge asks the judge opened here (one local server for the simulator and the judge)
        shared = lambda cfg: nullcontext(judge) if cfg == config else judges(cfg)  # noqa: E731
        self.reward_fns: list[RewardFn] = build_reward_fns(settings.rewards, "env.rewards", shared)
        self.end_of_turn = renderer.content.encode(renderer.end_of_turn)
        self.version = simulator_version()
        self.breaks: list[frozenset[int] | None] = []  # the last scored sessions' flagged turns (session judge)
        self.turn_rewards = TurnRewardSet(settings.turn_rewards, settings.turn_reward_options, judge)
        self.sessions_per_generate: list[int] = []  # the last play's live sessions in each generate call

    def close(self) -> None:
        for reward in self.reward_fns:
            if callable(getattr(reward.fn, "close", None)):
                reward.fn.close()
        self.turn_rewards.close()
        self._stack.close()

    def play(
        self,
        model,
        scenarios: Sequence[EvalExample],
        group_size: int,
        options: GenerationSettings,
        stop_ids: Sequence[int],
        pad_id: int,
        seed: int,
    ) -> tuple[Rollouts, list[Session]]:
        """``group_size`` sessions of each scenario (contiguous rows), played to their end."""
        started = time.perf_counter()
        budget = self.renderer.max_length - options.max_new_tokens
        played = [
            PlayedSession(Session.start(e, self.settings.max_turns), self.renderer.render_prompt(e.prompt, budget))
            for e in scenarios
            for _ in range(group_size)
        ]
        turn = 0
        self.sessions_per_generate = []
        while live := [p for p in played if p.session.ended_by is None]:
            turn += 1
            rows = [p.prompt_ids + p.ids for p in live]
            self.sessions_per_generate.append(len(rows))  # every session still live: one generate call per turn
            out = generate_rows(model, rows, options, stop_ids, pad_id, seed + 1_000_003 * turn)
            for p, ids, truncated in zip(live, out.completion_ids, out.truncated, strict=True):
                p.add(ids, own=True)  # before add_reply: the turn's index is the replies so far
                if ids[-len(self.end_of_turn) :] != self.end_of_turn:
                    p.add(self.end_of_turn, own=False)  # closes the turn as the template does; not the policy's
                p.truncated |= truncated
                p.session.add_reply(decode_completion(self.renderer.tokenizer, ids, stop_ids))
            asking = [p for p in live if p.session.ended_by is None]
            sim = self.settings.simulator
            replies = ask_simulator(
                self.simulator,
                [p.session for p in asking],
                turn,
                sim.stop_marker,
                sim.max_tokens,
                self.version,
                sim.seed,
            )
            for p, reply in zip(asking, replies, strict=True):
                p.session.take_user_reply(reply.text, reply.error, turn, sim.stop_marker)
                if p.session.ended_by is None:
                    p.add(user_turn_ids(self.renderer, model_turns(p.session)), own=False)
                    if len(p.prompt_ids) + len(p.ids) > budget:
                        p.session.ended_by = "length"
        rollouts = Rollouts(
            [p.prompt_ids for p in played],
            [p.ids for p in played],
            [p.truncated for p in played],
            time.perf_counter() - started,
            policy_mask=[p.policy for p in played],
            policy_turns=[p.turn for p in played],
        )
        return rollouts, [p.session for p in played]

    def score(self, sessions: Sequence[Session]) -> tuple[dict[str, list[float | None]], torch.Tensor, torch.Tensor]:
        """Every reward's score of each session, their weighted sum, and which sessions are scored. A session cut
        short (``Session.cut_short``: no whole conversation) is not scored, nor one failing an enabled simulator check
        (``env.simulator_checks``), nor one a reward gives no score (a session judge's failed verdict): its scores
        are None, its sum 0, and GRPO leaves it out of its group."""
        check_sessions(self.settings.simulator_checks, self.settings.simulator_check, sessions, "env.simulator_check")
        whole = [s for s in sessions if not s.left_out]
        self.breaks = [None] * len(sessions)
        scores: dict[str, list[float | None]] = {}
        for reward in self.reward_fns:
            if not whole:
                values: list[float | None] = []
            elif getattr(reward.fn, "scores_sessions", False):
                values = session_rewards(reward, [s.record() for s in whole], ["\n".join(s.replies) for s in whole])
                if hasattr(reward.fn, "last_breaks"):
                    flagged = iter(reward.fn.last_breaks)
                    self.breaks = [None if s.left_out else next(flagged) for s in sessions]
            else:
                values = list(per_turn_mean(reward, whole))
            given = iter(values)
            scores[reward.name] = [None if s.left_out else next(given) for s in sessions]
        weights = {r.name: r.weight for r in self.reward_fns}
        scored = [all(values[i] is not None for values in scores.values()) for i in range(len(sessions))]
        sums = [
            sum(weights[name] * values[i] for name, values in scores.items()) if ok else 0.0
            for i, ok in enumerate(scored)
        ]
        return scores, torch.tensor(sums, dtype=torch.float32), torch.tensor(scored, dtype=torch.bool)

    def score_turns(self, sessions: Sequence[Session]) -> TurnRewards:
        """``env.turn_rewards`` of the sessions ``score`` has just scored (judge_breaks reads its verdicts); a
        session cut short or failing a simulator check has none."""
        judged = [JudgedSession(s, b) for s, b in zip(sessions, self.breaks, strict=True)]
        whole = [j for j in judged if not j.session.left_out]
        found = self.turn_rewards.score(whole)
        given = iter(range(len(whole)))
        picks = [None if j.session.left_out else next(given) for j in judged]
        return TurnRewards(
            {name: [[] if k is None else values[k] for k in picks] for name, values in found.by_name.items()},
            [None if k is None else found.combined[k] for k in picks],
        )


def session_rewards(
    reward: RewardFn, records: Sequence[Mapping[str, Any]], replies: Sequence[str]
) -> list[float | None]:
    """A session reward's value of each session: a finite number, or None when it has no score for it."""
    values = list(reward.fn(records, replies, [None] * len(records)))
    if len(values) != len(records):
        raise ValueError(f"reward {reward.name!r} returned {len(values)} values for {len(records)} sessions")
    for i, v in enumerate(values):
        if v is not None and (isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v)):
            raise ValueError(f"reward {reward.name!r} returned {v!r} for session {i}; expected a finite number or None")
    return [None if v is None else float(v) for v in values]


def per_turn_mean(reward: RewardFn, sessions: Sequence[Session]) -> list[float]:
    """A completion reward on every character turn (its prompt: the conversation before it), averaged per session."""
    prompts, replies, owner = [], [], []
    for k, session in enumerate(sessions):
        turns = model_turns(session)
        for i, turn in enumerate(turns):
            if turn.role == "assistant":
                prompts.append(as_messages(turns[:i]))
                replies.append(turn.content)
                owner.append(k)
    values = score_rewards([reward], prompts, replies, [None] * len(replies))[reward.name]
    sums, counts = [0.0] * len(sessions), [0] * len(sessions)
    for k, value in zip(owner, values, strict=True):
        sums[k] += float(value)
        counts[k] += 1
    return [total / n for total, n in zip(sums, counts, strict=True)]


def session_metrics(sessions: Sequence[Session]) -> dict[str, float]:
    """How the sessions went: character turns per session, the share ended by each reason, and the share
    failing any simulator check and each one."""
    ended = Counter(s.ended_by for s in sessions)
    metrics = {"env/character_turns/mean": sum(s.character_turns for s in sessions) / len(sessions)}
    metrics |= {f"env/ended_by/{reason}": ended[reason] / len(sessions) for reason in ENDINGS}
    failed = Counter(name for s in sessions for name in s.failed_checks)
    metrics["env/failed_check/any"] = sum(bool(s.failed_checks) for s in sessions) / len(sessions)
    metrics |= {f"env/failed_check/{name}": failed[name] / len(sessions) for name in SIMULATOR_CHECKS.names()}
    return metrics
