"""Re-judging (``evaluator.rejudge=<run folder>``): an earlier conversation run's stored sessions scored by this
run's judge, without simulating anything: neither the user simulator nor the evaluated model is asked (no model
is loaded), so a judge's effect is measured on the very sessions another judge scored.

The source folder must hold conversations.jsonl, config.yaml and metrics.json of an ``evaluator=conversation``
run, and its sessions the scenarios of this run's test records (the same ids, characters, cards, personas and
goals); anything else is an error at startup naming the file, the record and the field. Sessions cut short in the
source (``CUT_SHORT``) stay out of the means and are counted, as in the run that made them. metrics.json records
where the sessions came from (``eval.rejudged.source``: the folder, run name, policy and its fingerprint, the user
simulator, the source's judges) beside this run's judges (``eval.session_judges``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data.conversation_session import Session
from rpbench.data.records import EvalExample
from rpbench.eval.benchmarks.conversation.pairwise import SCENARIO_FIELDS, read_sessions
from rpbench.eval.context import EvalContext
from rpbench.eval.provenance import fingerprint_path
from rpbench.scoring.chat.endpoints import endpoint_identity
from rpbench.scoring.judge.parties import (
    SERVED,
    Overlap,
    Party,
    family_overlaps,
    overlaps,
    recorded_party,
    rewarding_judges,
    trained_by,
)

SOURCE_FILES = ("conversations.jsonl", "config.yaml", "metrics.json")
UNRECORDED = "unrecorded"  # what a source run written before rpbench recorded it lacks


@dataclass(frozen=True)
class Source:
    """An earlier conversation run's folder, read: its config, results, sessions by id and the fingerprint its
    sessions were written under (None: the run wrote none)."""

    folder: Path
    config: Mapping[str, Any]
    metrics: Mapping[str, Any]
    sessions: Mapping[str, Mapping[str, Any]]
    fingerprint: Mapping[str, Any] | None

    @property
    def name(self) -> str:
        return self.folder.name

    def simulator(self) -> Party:
        """Who played the user: its served model, its own endpoint, or the source's judge."""
        sim = self.config["evaluator"]["simulator"]
        part = f"the user simulator of the re-judged run {self.name} (its evaluator.simulator)"
        if sim.get("server") is not None:
            return Party(part, SERVED, str(sim["server"]))
        if sim.get("base_url") is not None:
            return Party(part, endpoint_identity(sim["base_url"]), str(sim.get("model")))
        return replace(self.judge(), part=part)

    def policy(self) -> tuple[str | None, str]:
        """The policy that played the character: its registered family (None: unrecorded) and its name."""
        model = self.config.get("model") if isinstance(self.config.get("model"), Mapping) else {}
        return model.get("family"), str(self.metrics.get("model"))

    def judge(self) -> Party:
        return recorded_party(self.config["judge"], self.folder / "config.yaml", "judge", f"run {self.name}")


def _mapping(value: Any, path: Path, field: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DataFormatError(path, "(file)", field, what)
    return value


def read_source(folder: str) -> Source:
    """``folder`` read as a conversation run's (``Source``); a ConfigError when it is no such folder or lacks one
    of ``SOURCE_FILES``, a DataFormatError naming the file, the record and the field of what is wrong in them."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"evaluator.rejudge={folder}: no such folder (an earlier evaluator=conversation run's)")
    missing = [name for name in SOURCE_FILES if not (path / name).is_file()]
    metrics_path, config_path = path / "metrics.json", path / "config.yaml"
    if missing == ["conversations.jsonl"] and "rejudged" in _read_json(metrics_path).get("eval", {}):
        raise ConfigError(
            f"evaluator.rejudge={folder}: a re-judged run holds no sessions of its own; name the run it re-judged "
            f"({_read_json(metrics_path)['eval']['rejudged']['source']['folder']})"
        )
    if missing:
        raise ConfigError(
            f"evaluator.rejudge={folder}: {', '.join(missing)} missing (an evaluator=conversation run's folder holds "
            f"{', '.join(SOURCE_FILES)})"
        )
    metrics = _read_json(metrics_path)
    if metrics.get("evaluator") != "conversation":
        raise DataFormatError(
            metrics_path, "(file)", "evaluator", f"conversation (the run that simulated the sessions), got "
            f"{metrics.get('evaluator')!r}"
        )  # fmt: skip
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise DataFormatError(config_path, "(file)", "(yaml)", f"a run's composed config ({error})") from None
    config = _mapping(config, config_path, "(top level)", "a run's composed config (a mapping)")
    evaluator = _mapping(config.get("evaluator"), config_path, "evaluator", "the evaluator group (a mapping)")
    _mapping(evaluator.get("simulator"), config_path, "evaluator.simulator", "the user simulator's settings")
    _mapping(config.get("judge"), config_path, "judge", "the judge group (a mapping)")
    sessions = read_sessions(folder)
    conversations = path / "conversations.jsonl"
    for number, (sid, row) in enumerate(sessions.items(), start=1):
        for field in ("turn_limit", "n_character_turns"):
            if isinstance(row.get(field), bool) or not isinstance(row.get(field), int):
                raise DataFormatError(conversations, sid, field, f"an integer (session {number})")
        if row.get("error") is not None and not isinstance(row["error"], str):
            raise DataFormatError(conversations, sid, "error", "null or the simulator's error")
    stored = fingerprint_path(conversations)
    fingerprint = _read_json(stored) if stored.is_file() else None
    return Source(path, config, metrics, sessions, fingerprint)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise DataFormatError(path, "(file)", "(json)", f"a JSON object ({error.msg})") from None
    if not isinstance(value, dict):
        raise DataFormatError(path, "(file)", "(top level)", "a JSON object")
    return value


def source_problems(folder: str, pairwise_with: str | None) -> list[str]:
    """What keeps ``folder`` from being re-judged, found at startup (its files; not its scenarios: those are
    checked against the test records when they are read)."""
    found = []
    if pairwise_with is not None:
        found.append("evaluator.rejudge and evaluator.pairwise_with: one at a time (pairwise_with=null)")
    try:
        read_source(folder)
    except (ConfigError, DataFormatError) as error:
        found.append(f"evaluator.rejudge: {error}")
    return found


def scenario_problems(folder: str, examples: Sequence[EvalExample]) -> list[str]:
    """The source's sessions against this run's test records: one session per record and no other, each of the
    same scenario (``SCENARIO_FIELDS``)."""
    source = read_source(folder)
    path = source.folder / "conversations.jsonl"
    ids = [e.id for e in examples]
    found = [
        f"evaluator.rejudge: {path}: no session of test record {rid!r}: the scenarios must match the source run's "
        "(its data.files.test)"
        for rid in ids
        if rid not in source.sessions
    ]
    found += [
        f"evaluator.rejudge: {path}: record {sid}: not among this run's test records: the scenarios must match the "
        "source run's (its data.files.test)"
        for sid in source.sessions
        if sid not in set(ids)
    ]
    for e in examples:
        theirs = source.sessions.get(e.id)
        found += [
            f"evaluator.rejudge: {path}: record {e.id}: field '{field}': the test record's (it differs)"
            for field in (SCENARIO_FIELDS if theirs is not None else ())
            if theirs[field] != e.meta.get(field)
        ]
    return found


def rejudge_overlaps(folder: str, judges: Sequence[Party], allowed: bool) -> list[Overlap]:
    """This run's judges against who made the sessions: the source's user simulator, and the judges that rewarded
    the source policy's training (its own, and its ``init_from`` chain's); a judge of the policy's family (a
    warning)."""
    source = read_source(folder)
    rewarding = rewarding_judges(source.config, source.folder / "config.yaml", f"run {source.name}")
    rewarding += trained_by(source.config.get("init_from"))
    found = []
    for this in judges:
        pairs = [(source.simulator(), this), *((this, r) for r in rewarding)]
        found += overlaps(pairs, "evaluator.allow_shared_judge", allowed)
    return found + family_overlaps(judges, *source.policy())


def stored_sessions(source: Source, examples: Sequence[EvalExample]) -> list[Session]:
    """The source's sessions, as this run's test records' order has them (checked at startup to match)."""
    out = []
    for e in examples:
        row = source.sessions[e.id]
        messages = [{"role": m["role"], "text": m["text"]} for m in row["messages"]]
        out.append(Session(e, row["turn_limit"], messages, ended_by=row["ended_by"], error=row.get("error")))
    return out


def provenance(source: Source) -> dict[str, Any]:
    """Where the re-judged sessions came from: the source run, its policy (``model``, ``objective``, the
    fingerprint its sessions were written under), its user simulator and its judges."""
    fingerprint = dict(source.fingerprint) if source.fingerprint is not None else None
    simulator = source.simulator()
    recorded = source.metrics.get("eval", {}).get("session_judges")
    if recorded is None:  # a run written before rpbench recorded its judges' prompts
        judge = source.judge()
        backend = source.config["judge"].get("backend")
        recorded = [{"backend": backend, "model": judge.model, "endpoint": judge.endpoint, "prompt_sha256": UNRECORDED}]
    return {
        "folder": source.name,
        "run_name": source.metrics.get("run_name"),
        "model": source.metrics.get("model"),
        "objective": source.metrics.get("objective"),
        "records_sha256": source.metrics.get("records", {}).get("test", {}).get("records_sha256", UNRECORDED),
        "policy_fingerprint": UNRECORDED
        if fingerprint is None
        else {k: v for k, v in fingerprint.items() if not k.startswith("simulator.")},
        "simulator": {
            "endpoint": simulator.endpoint,
            "model": simulator.model,
            "settings": dict(source.config["evaluator"]["simulator"]),
            "fingerprint": UNRECORDED
            if fingerprint is None
            else {k: v for k, v in fingerprint.items() if k.startswith("simulator.")},
        },
        "max_turns": source.config["evaluator"].get("max_turns"),
        "judges": recorded,
        "sessions": len(source.sessions),
    }


def rejudge_sessions(ctx: EvalContext) -> dict[str, Any]:
    """``ctx``'s judges on the source run's sessions: the results a conversation run has (judge-free metrics
    measured again on the same text), with ``rejudged`` and ``session_judges``. Asks the judges alone."""
    from rpbench.eval.benchmarks.conversation.evaluator import judge_and_summarise, report_sections

    ev = ctx.settings
    source = read_source(ev.rejudge)
    sessions = stored_sessions(source, ctx.examples)
    origin = provenance(source)
    results: dict[str, Any] = {
        "n_records": len(sessions),
        "simulator_model": origin["simulator"]["model"],
        "rejudged": {"source": origin},
    }
    turns = origin["max_turns"] if isinstance(origin["max_turns"], int) else ev.max_turns
    with ctx.open_client() as client:
        judge_and_summarise(ctx, client, sessions, results, turns, source.policy())
    title = f"Re-judged sessions of `{origin['folder']}` (run `{origin['run_name']}`, policy `{origin['model']}`)"
    judges = ", ".join(f"`{j['backend']}:{j['model']}`" for j in origin["judges"])
    prompts = ", ".join(str(j["prompt_version"]) for j in results["session_judges"])
    header = (
        f"## {title}\n\nNo session was simulated: the {len(sessions)} sessions of that run (user simulator "
        f"`{origin['simulator']['model']}` at {origin['simulator']['endpoint']}; judged there by {judges}) are "
        f"scored by this run's judges (prompt {prompts})."
    )
    results["report_sections"] = [header, *report_sections(results)]
    return results
