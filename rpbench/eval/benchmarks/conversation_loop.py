"""The conversation loop: every live session advances one turn at a time, batched across scenarios.

Turn t: one generation call gives every live session's character reply (predictions_turn_<t>.jsonl), then
one batch of requests to the user simulator gives the next user message of each session still under its
turn limit (simulator_turn_<t>.jsonl). A session ends at its turn limit, when the simulator's reply holds
the stop marker (its text before the marker, if any, is kept as the last user message), or when the
simulator gives no usable reply (counted, with the error). Ended sessions are appended to
conversations.jsonl as they end.

Resuming after a kill replays the loop from these files: the model's replies and the simulator's messages
already written are read back, not asked again (a simulator error is kept as well, so the replay is the
same conversation), and conversations.jsonl gets only the sessions it does not hold yet.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rpbench.data.errors import DataFormatError
from rpbench.data.records import EvalExample, Turn, generated_reply
from rpbench.eval.benchmarks.base import read_jsonl
from rpbench.eval.context import EvalContext

log = logging.getLogger(__name__)

SIMULATOR_PROMPT = """You are playing a user who talks with {character}. Who you are: {persona}
What you want from this conversation: {goal}

The conversation so far:
{conversation}

Write only your next message to {character}, as this user, in a few sentences. Stay in your persona and \
pursue your goal. When your goal is reached or the conversation has come to its natural end, write \
{stop_marker} instead."""
USER_CUE = "User:"


@dataclass
class Session:
    example: EvalExample
    limit: int  # the character's replies at most
    messages: list[dict[str, str]] = field(default_factory=list)  # {"role": "user" | "character", "text"}
    ended_by: str | None = None  # turn_limit | simulator | simulator_error
    error: str | None = None

    @property
    def id(self) -> str:
        return self.example.id

    @property
    def character_turns(self) -> int:
        return sum(m["role"] == "character" for m in self.messages)

    def record(self) -> dict[str, Any]:
        """The session as conversations.jsonl holds it."""
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


def read_appended(path: Path, ids: Collection[str]) -> dict[str, dict[str, Any]]:
    """The records of a file this loop appends to, by id (none if absent). A last line cut off mid-write (a
    killed run) is removed from the file and logged; an unknown or repeated id is an error naming the file."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    if cut < len(data):
        log.warning(
            "%s: dropped an incomplete last line (%d bytes) from an interrupted run", path.name, len(data) - cut
        )
        with path.open("r+b") as f:
            f.truncate(cut)
    records: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(data[:cut].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, f"line {number}", "<line>", f"valid JSON ({error})") from None
        rid = record.get("id") if isinstance(record, dict) else None
        if rid not in ids or rid in records:
            raise DataFormatError(
                path,
                f"line {number}",
                "id",
                f"a session of this run's scenarios, once (got {rid!r}): use a fresh folder",
            )
        records[rid] = record
    return records


def model_prompt(session: Session, turn: int) -> EvalExample:
    """The model's input at ``turn``: the character's system prompt, then the conversation (user = user)."""
    turns = [session.example.prompt[0]]
    turns += [Turn("user" if m["role"] == "user" else "assistant", m["text"]) for m in session.messages]
    return replace(session.example, id=f"{session.id}#turn{turn}", prompt=tuple(turns))


def simulator_prompt(session: Session, stop_marker: str) -> str:
    meta = session.example.meta
    lines = [
        f"{USER_CUE} {m['text']}" if m["role"] == "user" else f"{meta['character']}: {m['text']}"
        for m in session.messages
    ]
    return SIMULATOR_PROMPT.format(
        character=meta["character"],
        persona=meta["persona"],
        goal=meta["goal"],
        conversation="\n".join(lines),
        stop_marker=stop_marker,
    )


def user_message(text: str, stop_marker: str) -> tuple[str, bool]:
    """(the user's message, whether the simulator ended the session) from its reply."""
    ended = stop_marker in text
    message = text.split(stop_marker, 1)[0].strip() if ended else text.strip()
    return message.removeprefix(USER_CUE).strip(), ended


class ConversationFiles:
    """conversations.jsonl, appended as sessions end; the ids it held when the run started are not rewritten."""

    def __init__(self, out_dir: Path, examples: Mapping[str, EvalExample]):
        self.path = out_dir / "conversations.jsonl"
        written = read_appended(self.path, examples)
        self.written = set(written)
        self.resumed = len(written)

    def add(self, sessions: Sequence[Session]) -> None:
        new = [s for s in sessions if s.id not in self.written]
        with self.path.open("a", encoding="utf-8") as f:
            for s in new:
                f.write(json.dumps(s.record(), ensure_ascii=False) + "\n")
        self.written.update(s.id for s in new)


def simulate(
    simulator: Any, sessions: Sequence[Session], turn: int, path: Path, stop_marker: str, max_tokens: int, version: str
) -> dict[str, dict[str, Any]]:
    """Each session's simulator reply after the character's ``turn``-th: read from ``path`` when there, else
    asked (in one batch) and appended to it. By session id: ``{"text", "error"}``."""
    from rpbench.scoring.judge import JudgeRequest

    keys = {f"{s.id}#user{turn + 1}": s for s in sessions}
    done = read_appended(path, keys)
    todo = [(key, s) for key, s in keys.items() if key not in done]
    requests = [
        JudgeRequest(({"role": "user", "content": simulator_prompt(s, stop_marker)},), max_tokens, version)
        for _, s in todo
    ]
    replies = simulator.judge_many(requests, desc=f"user simulator, turn {turn}") if requests else []
    with path.open("a", encoding="utf-8") as f:
        for (key, _), reply in zip(todo, replies):
            done[key] = {"id": key, "text": reply.text, "error": reply.error}
            f.write(json.dumps(done[key], ensure_ascii=False) + "\n")
    return {s.id: done[key] for key, s in keys.items()}


def run_sessions(
    ctx: EvalContext, simulator: Any, version: str
) -> tuple[list[Session], dict[str, Any], dict[str, int]]:
    """Every scenario's session, the generation report per turn, and what resuming read back."""
    from rpbench.eval.evaluate import generate  # the generic evaluation imports the benchmarks

    ev, out_dir = ctx.settings, ctx.out_dir
    sim = ev.simulator
    sessions = [
        Session(
            e, min(e.meta["turns"], ev.max_turns or e.meta["turns"]), [{"role": "user", "text": e.prompt[-1].content}]
        )
        for e in ctx.examples
    ]
    files = ConversationFiles(out_dir, {e.id: e for e in ctx.examples})
    generation: dict[str, Any] = {}
    turn = 0
    while live := [s for s in sessions if s.ended_by is None]:
        turn += 1
        records = [model_prompt(s, turn) for s in live]
        path = out_dir / f"predictions_turn_{turn}.jsonl"
        generation[f"turn_{turn}"] = {**generate(ctx, records, path), "path": path.name}  # named in the run folder
        replies = {row["id"]: row["prediction"] for row in read_jsonl(path)}
        for s, record in zip(live, records):
            s.messages.append({"role": "character", "text": generated_reply(replies[record.id])[0].strip()})
        for s in live:
            s.ended_by = "turn_limit" if s.character_turns >= s.limit else None
        files.add([s for s in live if s.ended_by is not None])
        asking = [s for s in live if s.ended_by is None]
        answers = simulate(
            simulator, asking, turn, out_dir / f"simulator_turn_{turn}.jsonl", sim.stop_marker, sim.max_tokens, version
        )
        for s in asking:
            answer = answers[s.id]
            message, ended = user_message(answer["text"] or "", sim.stop_marker)
            if answer["error"] is not None or not (message or ended):
                s.ended_by, s.error = "simulator_error", answer["error"] or f"turn {turn}: an empty reply"
                continue
            if message:
                s.messages.append({"role": "user", "text": message})
            if ended:
                s.ended_by = "simulator"
        files.add([s for s in asking if s.ended_by is not None])
    return sessions, generation, {"sessions_resumed": files.resumed, "turns": turn}
