"""A conversation session between a character (the model) and a simulated user: what ``evaluator=conversation``
and the training environment ``env=conversation`` share (rpbench's wording).

A ``Session`` is one scenario's conversation so far (``messages``: ``{"role": "user" | "character", "text"}``,
starting with the scenario's opening). After each character turn the user simulator is asked for the next user
message (``simulator_prompt``); its reply holding the stop marker ends the session (``take_user_reply``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from rpbench.data.conversation_pressure import pressure_prompt
from rpbench.data.records import EvalExample, Turn

SIMULATOR_PROMPT = """You are playing a user who talks with {character}. Who you are: {persona}
What you want from this conversation: {goal}

The conversation so far:
{conversation}

Write only your next message to {character}, as this user, in a few sentences. Stay in your persona and \
pursue your goal. When your goal is reached or the conversation has come to its natural end, write \
{stop_marker} instead."""
USER_CUE = "User:"
# The endings that leave no whole conversation: the simulator gave no usable reply, the evaluated model's endpoint
# none (evaluation), or (in training) another turn would not fit data.max_length. Such a session is counted by
# cause, not judged or averaged, and gets no reward.
CUT_SHORT = ("simulator_error", "policy_error", "length")


@dataclass
class Session:
    example: EvalExample
    limit: int  # the character's replies at most
    messages: list[dict[str, str]] = field(default_factory=list)  # {"role": "user" | "character", "text"}
    ended_by: str | None = None  # turn_limit | simulator | simulator_error | policy_error (| length in training)
    error: str | None = None
    # the simulator checks it failed (rpbench.scoring.simulator_checks): left out as a session cut short is
    failed_checks: tuple[str, ...] = ()

    @classmethod
    def start(cls, example: EvalExample, max_turns: int) -> Session:
        """The scenario's session: its opening said, its turn limit the scenario's ``turns`` capped by
        ``max_turns`` (``capped`` tells whether the cap cut it)."""
        turns = example.meta["turns"]
        return cls(example, min(turns, max_turns), [{"role": "user", "text": example.prompt[-1].content}])

    @property
    def capped(self) -> bool:
        return self.limit < self.example.meta["turns"]

    @property
    def cut_short(self) -> bool:
        return self.ended_by in CUT_SHORT

    @property
    def left_out(self) -> bool:
        """Not judged, averaged or rewarded: cut short, or failed a simulator check."""
        return self.cut_short or bool(self.failed_checks)

    @property
    def id(self) -> str:
        return self.example.id

    @property
    def character_turns(self) -> int:
        return sum(m["role"] == "character" for m in self.messages)

    @property
    def replies(self) -> list[str]:
        """The character's turns, in order."""
        return [m["text"] for m in self.messages if m["role"] == "character"]

    def add_reply(self, text: str) -> None:
        """The character's turn; the session ends when it reaches its turn limit."""
        self.messages.append({"role": "character", "text": text})
        if self.character_turns >= self.limit:
            self.ended_by = "turn_limit"

    def take_user_reply(self, text: str | None, error: str | None, turn: int, stop_marker: str) -> None:
        """The simulator's reply after the character's ``turn``-th: the user's next message, if any; the
        session ends on the stop marker (its text before the marker kept) or a failed or empty reply."""
        message, ended = user_message(text or "", stop_marker)
        if error is not None or not (message or ended):
            self.ended_by, self.error = "simulator_error", error or f"turn {turn}: an empty reply"
            return None
        if message:
            self.messages.append({"role": "user", "text": message})
        if ended:
            self.ended_by = "simulator"

    def record(self) -> dict[str, Any]:
        """The session as conversations.jsonl holds it (and the session judge reads it)."""
        meta = self.example.meta
        return {
            "id": self.id,
            "character": meta["character"],
            "card": meta["card"],
            "persona": meta["persona"],
            "goal": meta["goal"],
            "turn_limit": self.limit,
            "messages": self.messages,
            "n_character_turns": self.character_turns,
            "ended_by": self.ended_by,
            "error": self.error,
        }


def model_turns(session: Session) -> tuple[Turn, ...]:
    """The model's input: the character's system prompt, then the conversation (the character = assistant)."""
    turns = [session.example.prompt[0]]
    turns += [Turn("user" if m["role"] == "user" else "assistant", m["text"]) for m in session.messages]
    return tuple(turns)


def model_prompt(session: Session, turn: int) -> EvalExample:
    """The model's input at ``turn`` as an evaluation record ``<id>#turn<turn>``."""
    return replace(session.example, id=f"{session.id}#turn{turn}", prompt=model_turns(session))


def simulator_prompt(session: Session, stop_marker: str) -> str:
    meta = session.example.meta
    lines = [
        f"{USER_CUE} {m['text']}" if m["role"] == "user" else f"{meta['character']}: {m['text']}"
        for m in session.messages
    ]
    slots = {key: meta[key] for key in ("character", "persona", "goal")} | {"conversation": "\n".join(lines)}
    if "level" in meta:  # an adversarial scenario: the user presses as its level and tactic say
        return pressure_prompt(slots, meta["level"], meta["tactic"])
    return SIMULATOR_PROMPT.format(**slots, stop_marker=stop_marker)


def user_message(text: str, stop_marker: str) -> tuple[str, bool]:
    """(the user's message, whether the simulator ended the session) from its reply."""
    ended = stop_marker in text
    message = text.split(stop_marker, 1)[0].strip() if ended else text.strip()
    return message.removeprefix(USER_CUE).strip(), ended
