"""The conversation loop: every live session advances one turn at a time, batched across scenarios.

Turn t: one generation call gives every live session's character reply (predictions_turn_<t>.jsonl), then
one batch of requests to the user simulator gives the next user message of each session still under its
turn limit (simulator_turn_<t>.jsonl). A session ends at its turn limit, when the simulator's reply holds
the stop marker (its text before the marker, if any, is kept as the last user message), or when the
simulator gives no usable reply (counted, with the error), or when the evaluated model's endpoint gave no reply
after its retries (``policy_error``: the other sessions go on; endpoint generation's health counts the failed
requests). Both are cut short: not judged, counted by cause. Ended sessions are appended to conversations.jsonl
as they end; a session ended by ``policy_error`` is replayed so from there when the run resumes.

Resuming after a kill replays the loop from these files: the model's replies and the simulator's messages
already written are read back, not asked again (a simulator error is kept as well, so the replay is the
same conversation), and conversations.jsonl gets only the sessions it does not hold yet. Each file resumes
only under the fingerprint it was written with (``rpbench.eval.provenance``): the turn files of the model's
replies under the model's and the generation's; the simulator's turn files and conversations.jsonl under
those and the simulator's settings (its replies answer the model's); other files are moved aside.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.conversation_session import Session, model_prompt
from rpbench.data.records import EvalExample, generated_reply
from rpbench.eval.benchmarks.base import read_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.generate import EndpointGenerationError
from rpbench.eval.provenance import claim
from rpbench.scoring.judge.conversation import ask_simulator

log = logging.getLogger(__name__)


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


class ConversationFiles:
    """conversations.jsonl, appended as sessions end; the ids it held when the run started are not rewritten."""

    def __init__(self, out_dir: Path, examples: Mapping[str, EvalExample], fingerprint: Mapping[str, Any]):
        self.path = out_dir / "conversations.jsonl"
        self.set_aside = claim(self.path, fingerprint)
        written = read_appended(self.path, examples)
        self.written = set(written)
        # sessions an earlier run ended on the model's failed request: replayed as they ended
        self.policy_errors = {i: r for i, r in written.items() if r["ended_by"] == "policy_error"}
        self.resumed = len(written)

    def add(self, sessions: Sequence[Session]) -> None:
        new = [s for s in sessions if s.id not in self.written]
        with self.path.open("a", encoding="utf-8") as f:
            for s in new:
                f.write(json.dumps(s.record(), ensure_ascii=False) + "\n")
        self.written.update(s.id for s in new)


# The other parties' step after the character's ``turn``-th reply: for each session, in order, a record with the
# next user message's ``text`` (None on failure), its ``error`` and anything else worth keeping in the turn file.
Ask = Callable[[Sequence[Session], int], list[dict[str, Any]]]


def user_simulator(simulator: Any, sim: Any, version: str) -> Ask:
    """The simulated user of ``evaluator=conversation``: one request per session, in one batch."""

    def ask(sessions: Sequence[Session], turn: int) -> list[dict[str, Any]]:
        replies = ask_simulator(simulator, sessions, turn, sim.stop_marker, sim.max_tokens, version, sim.seed)
        return [{"text": reply.text, "error": reply.error} for reply in replies]

    return ask


def simulate(
    ask: Ask, sessions: Sequence[Session], turn: int, path: Path, fingerprint: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each session's other parties' reply after the character's ``turn``-th: read from ``path`` when there
    (written under ``fingerprint``), else asked (``ask``) and appended to it. By session id: ``{"text", "error",
    ...}``."""
    keys = {f"{s.id}#user{turn + 1}": s for s in sessions}
    claim(path, fingerprint)
    done = read_appended(path, keys)
    todo = [(key, s) for key, s in keys.items() if key not in done]
    replies = ask([s for _, s in todo], turn) if todo else []
    with path.open("a", encoding="utf-8") as f:
        for (key, _), reply in zip(todo, replies):
            done[key] = {"id": key, **reply}
            f.write(json.dumps(done[key], ensure_ascii=False) + "\n")
    return {s.id: done[key] for key, s in keys.items()}


def run_sessions(
    ctx: EvalContext,
    simulator: Any,
    version: str,
    ask: Ask | None = None,
    examples: Sequence[EvalExample] | None = None,
) -> tuple[list[Session], dict[str, Any], dict[str, int]]:
    """Every scenario's session, the generation report per turn, and what resuming read back with the
    simulator's replies asked and unusable (``simulator_requests``, ``simulator_failures``: the run's, the
    ones read back included). At most ``evaluator.max_turns`` turns. ``ask``: who answers the character (the
    simulated user by default; evaluator=coser: the scene's other characters, environment and next-speaker step);
    ``examples``: the scenarios (``ctx.examples`` by default)."""
    from rpbench.eval.evaluate import generate  # the generic evaluation imports the benchmarks

    ev, out_dir = ctx.settings, ctx.out_dir
    sim = ev.simulator
    fingerprint = session_fingerprint(ctx, simulator, version)
    examples = ctx.examples if examples is None else examples
    ask = user_simulator(simulator, sim, version) if ask is None else ask
    sessions = [Session.start(e, ev.max_turns) for e in examples]
    files = ConversationFiles(out_dir, {e.id: e for e in examples}, fingerprint)
    generation: dict[str, Any] = {}
    turn = asked = failed = 0
    while live := [s for s in sessions if s.ended_by is None]:
        turn += 1
        if turn > ev.max_turns:  # each session ends at its limit, at most max_turns
            raise AssertionError(f"sessions {[s.id for s in live]} outlived evaluator.max_turns={ev.max_turns}")
        for s in live:
            if (ended := files.policy_errors.get(s.id)) is not None and ended["n_character_turns"] == turn - 1:
                s.ended_by, s.error = "policy_error", ended["error"]
        if not (live := [s for s in live if s.ended_by is None]):
            break
        records = [model_prompt(s, turn) for s in live]
        path = out_dir / f"predictions_turn_{turn}.jsonl"
        failure = f"turn {turn}: no reply"
        try:
            report = generate(ctx, records, path, f"conversation replies, turn {turn}")
        except EndpointGenerationError as error:  # the model's endpoint failed some requests after its retries
            report, failure = {"policy_error": str(error)}, f"turn {turn}: {error}"
        generation[f"turn_{turn}"] = {**report, "path": path.name}  # named in the run folder
        replies = {row["id"]: row["prediction"] for row in read_jsonl(path)} if path.exists() else {}
        for s, record in zip(live, records):
            if record.id not in replies:
                s.ended_by, s.error = "policy_error", failure
                continue
            s.add_reply(generated_reply(replies[record.id])[0].strip())
        files.add([s for s in live if s.ended_by is not None])
        asking = [s for s in live if s.ended_by is None]
        answers = simulate(ask, asking, turn, out_dir / f"simulator_turn_{turn}.jsonl", fingerprint)
        for s in asking:
            s.take_user_reply(answers[s.id]["text"], answers[s.id]["error"], turn, sim.stop_marker)
        asked += len(asking)
        failed += sum(s.ended_by == "simulator_error" for s in asking)
        files.add([s for s in asking if s.ended_by is not None])
    counts = {"simulator_requests": asked, "simulator_failures": failed}
    resumed: dict[str, Any] = {"sessions_resumed": files.resumed, "turns": turn, **counts}
    if files.set_aside is not None:
        resumed["set_aside"] = files.set_aside
    return sessions, generation, resumed


def session_fingerprint(ctx: EvalContext, simulator: Any, version: str) -> dict[str, Any]:
    """What the simulator's files and the sessions are resumed under: the model's replies' fingerprint, the
    turn limit and the simulator (who answers and its model; sampling, length, stop marker, prompt version)."""
    from rpbench.eval.evaluate import generation_fingerprint

    sim = ctx.settings.simulator
    return {
        **generation_fingerprint(ctx),
        "max_turns": ctx.settings.max_turns,
        "simulator.server": sim.server,
        "simulator.endpoint": simulator.endpoint,  # who answers (a served model: rpbench.serve, its name below)
        "simulator.model": simulator.config.model,
        "simulator.temperature": sim.temperature,
        "simulator.max_tokens": sim.max_tokens,
        "simulator.stop_marker": sim.stop_marker,
        "simulator.version": version,
        **({} if sim.seed is None else {"simulator.seed": sim.seed}),  # absent when unset: older runs resume
    }
