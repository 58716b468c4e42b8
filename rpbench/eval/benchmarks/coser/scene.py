"""The scene's other parties between two turns of the evaluated character (``evaluator=coser``): the step that
answers the character in the shared session loop (``conversation.sessions.run_sessions``'s ``ask``).

After the character's turn, the next-speaker model picks who acts (``Next Speaker: <name>`` on its last such
line, or the whole reply when it is a name); an answer that is no speaker of the scene, or the one who has just
spoken, is counted (``next_speaker_invalid``) and replaced by a seeded draw among the major characters and the
environment (the authors' fallback, theirs unseeded). The picked other character (the characters' model) or
the environment (its model) writes its message; then the next-speaker model is asked again, until it picks the
evaluated character. ``<END CHAT>`` ends the scene once it has ``evaluator.min_rounds`` messages (earlier it is
an invalid answer); the scene also ends at ``data.max_rounds`` messages. Before the first turn, a scene whose
first speaker is another party opens with that party's message (turn 0).

Each step's record (a line of ``simulator_turn_<t>.jsonl``): ``text``, what the character is shown (each new
message as ``<speaker>: <text>``, thoughts in [brackets] removed; the session's stop marker appended when the
scene ended), ``error`` (a failed request: the session is cut short), ``lines`` (speaker and raw text of each new
message), ``next_speaker_invalid``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rpbench.data.conversation_session import Session
from rpbench.data.coser import scene_text, strip_thoughts
from rpbench.data.coser_prompts import END_SCENE, ENVIRONMENT, SIMULATOR_ROLE, CoserPrompts
from rpbench.scoring.chat.client import ChatRequest
from rpbench.scoring.judge.coser import parse_next_speaker

HISTORY_CUE = "The scene so far:"


@dataclass
class Step:
    """One session's step in progress."""

    session: Session
    before: list[tuple[str, str]]  # the scene's messages before this step
    last: str | None  # who spoke last
    lines: list[tuple[str, str]] = field(default_factory=list)
    invalid: int = 0
    ended: bool = False
    error: str | None = None
    done: bool = False
    next: str | None = None  # who acts next, once picked

    @property
    def rounds(self) -> int:
        return len(self.before) + len(self.lines)

    def history(self) -> str:
        return scene_text(self.before + self.lines)


@dataclass
class ScenePlayers:
    """The other characters', the environment's and the next-speaker step's clients, and what they are asked."""

    characters: Any
    environment: Any
    next_speaker: Any
    settings: Any  # CoserSettings
    prompts: CoserPrompts
    version: str
    stop_marker: str
    max_rounds: int
    # the earlier steps' new messages, by (session id, the character turn they followed)
    after: dict[tuple[str, int], list[tuple[str, str]]] = field(default_factory=dict)

    def remember(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Steps read back from the turn files (``{"<id>#user<t+1>": record}``)."""
        for key, record in records.items():
            sid, _, turn = key.rpartition("#user")
            self.after[(sid, int(turn) - 1)] = [(m["speaker"], m["text"]) for m in record.get("lines") or []]

    def scene(self, session: Session) -> list[tuple[str, str]]:
        """The scene so far: the opening step's messages, then each character reply and the step after it."""
        out = list(self.after.get((session.id, 0), []))
        for k, reply in enumerate(session.replies, start=1):
            out.append((session.example.meta["character"], reply))
            out += self.after.get((session.id, k), [])
        return out

    def __call__(self, sessions: Sequence[Session], turn: int) -> list[dict[str, Any]]:
        steps = [Step(s, self.scene(s), None if turn == 0 else s.example.meta["character"]) for s in sessions]
        for step in steps:
            if step.rounds >= self.max_rounds:
                step.ended = step.done = True
        if turn == 0:  # the opening: the scene's first speaker acts without being picked
            self.speak([(s, s.session.example.meta["speakers"][0]) for s in steps if not s.done])
        while live := [s for s in steps if not s.done]:
            self.pick(live, turn)
            asking = [(s, s.next) for s in live if not s.done]
            self.speak(asking)
        out = []
        for step in steps:
            self.after[(step.session.id, turn)] = step.lines
            text = scene_text(step.lines) + (f"\n\n{self.stop_marker}" if step.ended else "")
            out.append(
                {
                    "text": None if step.error else text.strip(),
                    "error": step.error,
                    "lines": [{"speaker": sp, "text": t} for sp, t in step.lines],
                    "next_speaker_invalid": step.invalid,
                }
            )
        return out

    def pick(self, steps: Sequence[Step], turn: int) -> None:
        """Ask the next-speaker model who acts next in each scene; set ``step.next`` or end the step."""
        requests = []
        for s in steps:
            meta = s.session.example.meta
            system = self.prompts.render(
                "next_speaker", environment=ENVIRONMENT, all_characters=str(meta["speakers"]), scenario=meta["scenario"]
            )
            user = f"{HISTORY_CUE}\n\n{s.history()}\n\nWho acts next?"
            requests.append(self.request(system, user, self.settings.next_speaker))
        replies = self.next_speaker.ask_many(requests, desc=f"next speaker, turn {turn}")
        for s, reply in zip(steps, replies):
            meta = s.session.example.meta
            if reply.error is not None:
                s.error, s.done = f"turn {turn}: next speaker: {reply.error}", True
                continue
            name = parse_next_speaker(reply.text or "")
            if name == END_SCENE and s.rounds >= self.settings.min_rounds:
                s.ended = s.done = True
                continue
            if name not in meta["speakers"] or name == s.last:
                s.invalid += 1
                pool = [c for c in [*meta["major_characters"], ENVIRONMENT] if c != s.last and c in meta["speakers"]]
                pool = pool or [c for c in meta["speakers"] if c != s.last]
                name = random.Random(f"{s.session.id}:{turn}:{s.rounds}").choice(sorted(pool))
            if name == meta["character"]:
                s.done = True
            elif s.rounds >= self.max_rounds:
                s.ended = s.done = True
            s.next = name

    def speak(self, asking: Sequence[tuple[Step, str]]) -> None:
        """Each picked speaker's message, asked in one batch per model."""
        for party, client, settings in (
            ("environment", self.environment, self.settings.environment),
            ("characters", self.characters, self.settings.simulator),
        ):
            mine = [(s, who) for s, who in asking if (who == ENVIRONMENT) == (party == "environment")]
            if not mine:
                continue
            requests = [self.request(self.system(s, who), self.cue(s, who), settings) for s, who in mine]
            for (s, who), reply in zip(mine, client.ask_many(requests, desc=f"scene: {party}")):
                if reply.error is not None or not (reply.text or "").strip():
                    s.error, s.done = f"{who}: {reply.error or 'an empty reply'}", True
                    continue
                s.lines.append((who, reply.text.strip()))
                s.last = who
                if s.rounds >= self.max_rounds:
                    s.ended = s.done = True

    def system(self, s: Step, who: str) -> str:
        meta = s.session.example.meta
        if who == ENVIRONMENT:
            major = str([c for c in meta["major_characters"] if c != ENVIRONMENT])
            return self.prompts.render(
                "environment", simulator_role=SIMULATOR_ROLE, major_characters=major, scenario=meta["scenario"]
            )
        profiles = meta["profiles"]
        others = "\n\n".join(f"{n}: {p}" for n, p in profiles.items() if n != who) or "(none described)"
        return self.prompts.render(
            "character",
            character=who,
            book=meta["book"],
            profile=profiles.get(who, "(no profile given)"),
            scenario=meta["scenario"],
            motivation=meta["thoughts"].get(who) or "(not given)",
            others=others,
        )

    def cue(self, s: Step, who: str) -> str:
        history = f"{HISTORY_CUE}\n\n{s.history()}" if s.rounds else f"{HISTORY_CUE}\n\n(nothing yet)"
        if who == ENVIRONMENT:
            return f"{history}\n\nDescribe how the surroundings respond now."
        return self.prompts.render("other_character", history=history, character=who)

    def request(self, system: str, user: str, settings: Any) -> ChatRequest:
        messages = ({"role": "system", "content": system}, {"role": "user", "content": user})
        sampling = None
        if settings.seed is not None:
            sampling = {"temperature": settings.temperature, "seed": settings.seed}
        return ChatRequest(messages, settings.max_tokens, self.version, sampling)


def judged_lines(lines: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The scene as the judge reads it: the characters' thoughts removed, the environment's text kept."""
    return [(sp, t if sp == ENVIRONMENT else strip_thoughts(t)) for sp, t in lines]
