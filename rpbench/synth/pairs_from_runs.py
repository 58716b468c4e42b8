"""Multi-turn preference pairs from judged conversation runs (multi-turn DPO's data, ``data=session_pairs``).

    python -m rpbench.synth.pairs_from_runs RUN RUN [RUN ...] --out pairs.jsonl [--dimension overall]

Each RUN is an ``evaluator=conversation`` run folder (its ``conversations.jsonl`` and ``scores.jsonl``) on the
same scenarios. A session's score is its judge's verdict on ``--dimension`` (a rubric dimension, or
``overall``: the mean over the rubric's dimensions, as metrics.json's ``overall``). Per scenario, every two
runs whose sessions both have a score give a pair: chosen = the session scored higher, rejected = the other;
equal scores (ties) and sessions without a score (the judge's reply unparsed or unanswered) give none and are
counted, as are scenarios found in one run only. The pair's prompt is the character's system prompt and the
opening (all the two sessions share), then each session's turns; a session's user message after its last
character turn (the simulator's farewell) trains nothing and is left out, counted once per pair side.

Writes the pairs (``rpbench.data.session_pairs`` reads them back before the command ends) and
``<out>.summary.json`` with the counts. Errors name the file, the record and the field: a folder without
sessions or scores, a session without a score row, scenarios that differ between runs, rubrics that differ.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.atomic import partial_path, publish
from rpbench.core.errors import DataFormatError, RpbenchError
from rpbench.data.conversation import character_prompt
from rpbench.data.readers import (
    STRICT,
    NoRubrics,
    Source,
    as_object,
    read_file,
    record_id,
    require,
    require_list,
    require_str,
)
from rpbench.data.session_pairs import read_pairs

OVERALL = "overall"
SESSIONS, SCORES = "conversations.jsonl", "scores.jsonl"
SCENARIO_FIELDS = ("character", "card", "persona", "goal", "opening")
ROLES = {"user": "user", "character": "assistant"}


@dataclass(frozen=True)
class Row:
    """A record of a run's file, by its id (``readers.read_file`` checks the ids are unique)."""

    id: str
    data: Any


@dataclass(frozen=True)
class JudgedSession:
    scenario: dict[str, str]  # SCENARIO_FIELDS
    messages: list[dict[str, str]]  # after the opening, as the pair file holds them ({"role", "content"})
    verdicts: dict[str, int | None]


def parse_session(raw: Any, source: Source) -> Row:
    record = as_object(raw, source)
    require(record, "id", source)
    rid, source = record_id(record, "id", source)
    scenario = {name: require_str(record, name, source) for name in SCENARIO_FIELDS[:-1]}
    messages = []
    for i, message in enumerate(require_list(record, "messages", source)):
        message = as_object(message, source, f"messages[{i}]")
        role = require_str(message, "role", source, f"messages[{i}].role")
        if role != ("user", "character")[i % 2]:
            raise source.error(
                f"messages[{i}].role", f"{('user', 'character')[i % 2]} (the two alternate), got {role!r}"
            )
        text = require_str(message, "text", source, f"messages[{i}].text", allow_empty=True)
        messages.append({"role": ROLES[role], "content": text})
    if len(messages) < 2:
        raise source.error("messages", "the opening and at least one character reply")
    return Row(rid, {"scenario": {**scenario, "opening": messages[0]["content"]}, "messages": messages[1:]})


def parse_scores(raw: Any, source: Source) -> Row:
    record = as_object(raw, source)
    require(record, "id", source)
    rid, source = record_id(record, "id", source)
    verdicts = as_object(require(record, "verdicts", source), source, "verdicts")
    for name, value in verdicts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise source.error(f"verdicts.{name}", f"a score or null (no verdict), got {value!r}")
    return Row(rid, dict(verdicts))


def read_run(folder: Path) -> dict[str, JudgedSession]:
    """A conversation run's sessions with their verdicts, by scenario id."""
    paths = {name: folder / name for name in (SESSIONS, SCORES)}
    for name, path in paths.items():
        if not path.is_file():
            what = "the sessions" if name == SESSIONS else "the judge's session scores"
            raise DataFormatError(path, "file", "<file>", f"{what} of an evaluator=conversation run (missing)")
    sessions = {row.id: row.data for row in read_file(paths[SESSIONS], parse_session, "raise").examples}
    scores = {row.id: row.data for row in read_file(paths[SCORES], parse_scores, "raise").examples}
    for sid in sessions:
        if sid not in scores:
            raise DataFormatError(paths[SCORES], sid, "id", f"a score row for every session of {SESSIONS} (none)")
    return {sid: JudgedSession(s["scenario"], s["messages"], scores[sid]) for sid, s in sessions.items()}


def session_score(session: JudgedSession, dimension: str, where: Path, sid: str) -> float | None:
    """The session's score on ``dimension`` (``overall``: the mean over the rubric), None without a verdict."""
    verdicts = session.verdicts
    if dimension == OVERALL:
        return None if not verdicts or None in verdicts.values() else sum(verdicts.values()) / len(verdicts)
    if dimension not in verdicts:
        raise DataFormatError(where, sid, f"verdicts.{dimension}", f"a rubric dimension (has {sorted(verdicts)})")
    return verdicts[dimension]


def check_same(runs: Sequence[tuple[Path, Mapping[str, JudgedSession]]]) -> None:
    """Every scenario holds the same fields in each run that has it, its sessions the same rubric dimensions
    (compared with the first run holding it)."""
    first: dict[str, tuple[Path, JudgedSession]] = {}
    for folder, sessions in runs:
        for sid, session in sessions.items():
            if sid not in first:
                first[sid] = folder, session
                continue
            where, other = first[sid]
            for name in SCENARIO_FIELDS:
                if session.scenario[name] != other.scenario[name]:
                    raise DataFormatError(
                        folder / SESSIONS, sid, name, f"the same scenario as {where / SESSIONS} (differs)"
                    )
            if set(session.verdicts) != set(other.verdicts):
                rubric = sorted(other.verdicts)
                raise DataFormatError(folder / SCORES, sid, "verdicts", f"the rubric of {where / SCORES}: {rubric}")


def training_turns(session: JudgedSession) -> tuple[list[dict[str, str]], bool]:
    """The session's turns up to its last character turn, and whether a user message after it was left out."""
    last = max(i for i, m in enumerate(session.messages) if m["role"] == "assistant")
    return session.messages[: last + 1], last + 1 < len(session.messages)


def build_pairs(folders: Sequence[Path], dimension: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pair records of the runs in ``folders`` on ``dimension``, and the counts the summary reports."""
    runs = [(Path(f), read_run(Path(f))) for f in folders]
    check_same(runs)
    counts: Counter[str] = Counter()
    pairs = []
    scenarios = sorted({sid for _, sessions in runs for sid in sessions})
    for sid in scenarios:
        held = [(i, folder, sessions[sid]) for i, (folder, sessions) in enumerate(runs, start=1) if sid in sessions]
        counts["scenarios_in_one_run"] += len(held) == 1
        scored = {i: session_score(s, dimension, folder / SCORES, sid) for i, folder, s in held}
        counts["sessions_without_score"] += sum(v is None for v in scored.values())
        empty = {i for i, _, s in held if any(not m["content"].strip() for m in s.messages)}
        counts["sessions_with_an_empty_turn"] += len(empty)
        for (i, folder_i, a), (j, folder_j, b) in itertools.combinations(held, 2):
            if scored[i] is None or scored[j] is None:
                counts["pairs_without_score"] += 1
            elif scored[i] == scored[j]:
                counts["ties"] += 1
            elif empty & {i, j}:
                counts["pairs_with_an_empty_turn"] += 1
            else:
                high, low = sorted([(scored[i], folder_i, a), (scored[j], folder_j, b)], key=lambda t: -t[0])
                pairs.append(pair_record(f"{sid}#{i}-{j}", sid, dimension, high, low, counts))
    summary = {"runs": [str(f) for f in folders], "dimension": dimension, "scenarios": len(scenarios)}
    keys = (
        "scenarios_in_one_run",
        "sessions_without_score",
        "sessions_with_an_empty_turn",
        "pairs_without_score",
        "ties",
        "pairs_with_an_empty_turn",
        "user_turns_after_the_last_reply",
    )
    return pairs, {**summary, "pairs": len(pairs), **{k: counts[k] for k in keys}}


def pair_record(pid: str, sid: str, dimension: str, high: tuple, low: tuple, counts: Counter) -> dict[str, Any]:
    (chosen_score, chosen_run, chosen), (rejected_score, rejected_run, rejected) = high, low
    sessions = {}
    for side, session in (("chosen", chosen), ("rejected", rejected)):
        sessions[side], cut = training_turns(session)
        counts["user_turns_after_the_last_reply"] += cut
    scenario = chosen.scenario
    return {
        "id": pid,
        "system": character_prompt(scenario["character"], scenario["card"]),
        "opening": scenario["opening"],
        **sessions,
        "meta": {
            "scenario": sid,
            "dimension": dimension,
            "chosen": {"run": chosen_run.name, "score": chosen_score},
            "rejected": {"run": rejected_run.name, "score": rejected_score},
        },
    }


def write_pairs(folders: Sequence[Path], out: Path, dimension: str) -> dict[str, Any]:
    """Build the pairs into ``out`` (read back as ``data=session_pairs``) and the summary beside it."""
    pairs, summary = build_pairs(folders, dimension)
    if not pairs:
        raise RpbenchError(f"no preference pair from {[str(f) for f in folders]} on {dimension!r}: {summary}")
    for path, text in (
        (out, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs)),
        (summary_path(out), json.dumps(summary, indent=2) + "\n"),
    ):
        partial = partial_path(path)
        partial.write_text(text, encoding="utf-8")
        publish(partial, path)
    read_pairs(out, NoRubrics(task_dimensions=None), STRICT)  # the file reads back as data=session_pairs reads it
    return summary


def summary_path(out: Path) -> Path:
    return out.with_name(f"{out.stem}.summary.json")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rpbench.synth.pairs_from_runs", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="evaluator=conversation run folders (two or more)")
    parser.add_argument("--out", type=Path, required=True, help="the pairs file to write (JSON Lines)")
    parser.add_argument("--dimension", default=OVERALL, help="a rubric dimension, or overall (the rubric's mean)")
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error("two or more run folders: a pair compares two sessions of one scenario")
    print(json.dumps(write_pairs(args.runs, args.out, args.dimension), indent=2))


if __name__ == "__main__":
    main()
