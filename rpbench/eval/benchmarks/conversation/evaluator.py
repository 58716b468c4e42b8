"""Whole conversations (``evaluator=conversation``): a simulated user talks with the evaluated model's
character for up to N turns per scenario (``data=conversation``), then the whole session is judged.

- The loop (``sessions``): sessions batched across scenarios, one generation call per turn for all
  live sessions; the user simulator is an OpenAI-compatible endpoint (the judge's unless
  ``evaluator.simulator.base_url`` names another, or ``evaluator.simulator.server`` a conf/model entry this
  run serves on 127.0.0.1) with its own sampling; transcripts in conversations.jsonl, resumable after a kill.
  The session itself and the simulator's prompt are in ``rpbench.data.conversation_session``
  (``env=conversation`` trains on the same sessions).
- The judge (``rpbench.scoring.judge.conversation``): one request per session scores every
  ``evaluator.rubric`` dimension 1-5 and flags the character turns where the character broke. Per dimension:
  mean with a bootstrap CI; ``overall``: the mean over dimensions of each session's scores, summarised the
  same way.
- Without a judge (``drift``): each reply's similarity to the character card and its slope
  over turns; out-of-character phrase counts (``evaluator.ooc_phrases``), which flag turns as well.

Two models on the same scenarios: ``evaluator.pairwise_with`` (another conversation run's folder) has the
judge compare each pair of sessions, position-swapped (``pairwise``): this run's win rate per
dimension; ``evaluator.compare_to`` adds paired bootstrap tests of every dimension and judge-free metric
(``rpbench.eval.evaluate.compare``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.distributed import rank_and_world
from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.core.typed import Problem, Settings
from rpbench.data.conversation_session import Session
from rpbench.data.records import EvalExample
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, JudgeTally, write_jsonl
from rpbench.eval.benchmarks.conversation.checked import check_simulator, checks_section, failed_checks
from rpbench.eval.benchmarks.conversation.drift import load_encoder, ooc_hits, session_drift
from rpbench.eval.benchmarks.conversation.ensemble import (
    Judges,
    ask_each,
    attach_ensemble,
    ensemble_configs,
    ensemble_report,
    flip_rate,
    judge_ensemble,
    judge_parties,
    merged,
    named_rows,
    pairwise_ensemble,
)
from rpbench.eval.benchmarks.conversation.judged_by import judge_record
from rpbench.eval.benchmarks.conversation.pairwise import (
    SCENARIO_FIELDS,
    failed_check_ids,
    judge_pairwise,
    read_other,
    read_sessions,
    scenario_problems,
)
from rpbench.eval.benchmarks.conversation.rejudge import rejudge_overlaps, rejudge_sessions, source_problems
from rpbench.eval.benchmarks.conversation.rejudge import scenario_problems as scenario_problems_of_source
from rpbench.eval.benchmarks.conversation.self_preference import of_run as self_preference_of_run
from rpbench.eval.benchmarks.conversation.self_preference import report as self_preference_report
from rpbench.eval.benchmarks.conversation.sessions import run_sessions
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import JudgedSettings
from rpbench.eval.stats import summarize
from rpbench.models.config_tree import model_options
from rpbench.models.settings import ModelSettings
from rpbench.scoring.chat.client import EndpointSettings
from rpbench.scoring.judge.conversation import (
    Simulator,
    judge_sessions,
    open_simulator,
    simulator_key_problems,
    simulator_version,
)
from rpbench.scoring.judge.parties import Overlap, Party, family_overlaps, overlaps, simulator_party
from rpbench.scoring.simulator_checks.base import SimulatorCheckSettings, check_name_problems

log = logging.getLogger(__name__)
DRIFT_METRICS = ("mean_similarity", "drift_slope")


@dataclass(frozen=True, kw_only=True)
class Drift(Settings):
    enabled: bool
    encoder: str | None
    batch_size: int

    def problems(self) -> list[Problem]:
        return [] if self.batch_size >= 1 else [("batch_size", "an integer >= 1")]


@dataclass(frozen=True, kw_only=True)
class ConversationSettings(JudgedSettings):
    max_turns: int
    simulator: Simulator
    rubric: Mapping[str, str]
    drift: Drift
    ooc_phrases: tuple[str, ...]
    pairwise_with: str | None  # another conversation run's folder: position-swapped pairwise judging
    allow_shared_judge: bool  # one model as simulator and judge, or as judge and the policy's reward judge
    judges: Judges  # the session judge ensemble: each judge's settings over the judge group's (ensemble.py)
    rejudge: str | None  # an earlier conversation run's folder: its sessions judged again, nothing simulated
    simulator_checks: tuple[str, ...]  # the enabled checks (rpbench.scoring.simulator_checks)
    simulator_check: SimulatorCheckSettings

    needs_metrics = False  # judged and measured alone

    def problems(self) -> list[Problem]:
        found = super().problems()
        if self.max_turns < 1:
            found.append(("max_turns", "an integer >= 1 (the cap on every scenario's turns)"))
        if not self.rubric or not all(q.strip() for q in self.rubric.values()):
            found.append(("rubric", "at least one dimension, each with what the judge is to look for"))
        if any(not p.strip() for p in self.ooc_phrases):
            found.append(("ooc_phrases", "non-empty phrases"))
        if self.pairwise_with is not None and not (Path(self.pairwise_with) / "conversations.jsonl").is_file():
            found.append(("pairwise_with", "null or a conversation run's folder (with conversations.jsonl)"))
        elif self.pairwise_with is not None:
            try:
                read_sessions(self.pairwise_with)
            except DataFormatError as error:
                found.append(f"pairwise_with: {error}")
        found += check_name_problems(self.simulator_checks, "simulator_checks")
        options, server = model_options(), self.simulator.server
        if server is not None and options and server not in options:
            found.append(("simulator.server", f"null or a conf/model entry: one of {', '.join(options)}"))
        return found + (source_problems(self.rejudge, self.pairwise_with) if self.rejudge is not None else [])


class Conversation(Benchmark):
    headlines = (Headline("session score (1-5)", ("conversation", "judge", "overall"), scores="verdicts"),)
    judged = True
    settings_class = ConversationSettings

    def simulator_version(self) -> str:
        """The user simulator's prompt identity: its files resume, and its replies are cached, under it."""
        return simulator_version()

    def evaluates_model(self, settings: Settings) -> bool:
        """Not when re-judging (``evaluator.rejudge``): the stored sessions are judged, no model is loaded."""
        return settings.rejudge is None

    def judge_requests(self, settings: Settings, examples: Sequence[EvalExample]) -> list[int]:
        """Per session: the simulator's messages (one per character turn but the last; none when this run
        serves the simulator), one judgement, and two pairwise judgements (both orders) with ``pairwise_with``;
        the judgements by each judge of ``evaluator.judges``."""
        pairwise = 2 if settings.pairwise_with else 0
        served = settings.simulator.server is not None or settings.rejudge is not None  # re-judged: none asked
        simulated = [0 if served else min(e.meta["turns"], settings.max_turns) - 1 for e in examples]
        judges = max(1, len(settings.judges or ()))
        return [asked + (1 + pairwise) * judges for asked in simulated]

    def reaskable_requests(self, settings: Settings, examples: Sequence[EvalExample]) -> list[int]:
        """The judgements (the session's, and the pairwise ones, by each judge); the simulator's messages are not
        re-asked."""
        return [(1 + (2 if settings.pairwise_with else 0)) * max(1, len(settings.judges or ()))] * len(examples)

    def problems(self, settings: Settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        out = []
        if judge is None:
            out.append("evaluator=conversation needs a judge (it also plays the user): judge=openai|local|vllm|...")
        for i, over in enumerate(settings.judges or () if judge is not None else ()):
            EndpointSettings.collect(merged(judge.plain(), over), f"evaluator.judges[{i}]", out)
        if data.format != "conversation":
            out.append(f"evaluator=conversation reads data=conversation (format conversation), got {data.format}")
        return out + simulator_key_problems(settings.simulator, "evaluator.simulator")

    def overlaps(
        self, settings: Settings, judge: EndpointSettings | None, model: ModelSettings, trained_by: Sequence[Party]
    ) -> list[Overlap]:
        """The user simulator and a judge (each of ``evaluator.judges``), or a judge and a judge that rewarded the
        evaluated model's training, played by one model (allowed by ``evaluator.allow_shared_judge``); a judge of
        the evaluated model's family (a warning)."""
        if judge is None:
            return []
        if settings.rejudge is not None:  # who made the stored sessions: the source run's parties
            judges = judge_parties(judge, settings.judges)
            return rejudge_overlaps(settings.rejudge, judges, settings.allow_shared_judge)
        user = simulator_party(settings.simulator, judge, "the user simulator (evaluator.simulator)")
        found, judges = [], judge_parties(judge, settings.judges)
        for this in judges:
            pairs = [(user, this), *((this, rewarding) for rewarding in trained_by)]
            found += overlaps(pairs, "evaluator.allow_shared_judge", settings.allow_shared_judge)
        return found + family_overlaps(judges, model.family, model.name)

    def record_problems(self, settings: Settings, data: DataSettings, examples: Sequence[EvalExample]) -> list[str]:
        """With ``pairwise_with``: the other run shares scenarios with these records, and the same ones; with
        ``rejudge``: the source run holds a session of each record's scenario, and no other."""
        if settings.rejudge is not None:
            return scenario_problems_of_source(settings.rejudge, examples)
        if settings.pairwise_with is None:
            return []
        scenarios = [{"id": e.id, **{f: e.meta.get(f) for f in SCENARIO_FIELDS}} for e in examples]
        return scenario_problems(settings.pairwise_with, scenarios)

    def from_files(self, ctx: EvalContext) -> dict[str, Any] | None:
        """``evaluator.rejudge``: the source run's sessions judged by this run's judge (``rejudge``)."""
        return rejudge_sessions(ctx) if ctx.settings.rejudge is not None else None

    def evaluate_model(self, ctx: EvalContext) -> dict[str, Any]:
        if rank_and_world()[1] > 1:
            raise ConfigError("evaluator=conversation runs in one process: evaluate with trainer.devices=1")
        ev = ctx.settings
        with ctx.open_client() as client:
            with open_simulator(client, ev.simulator, ctx.local_judge_server, "evaluator.simulator") as simulator:
                sessions, generation, resumed = run_sessions(ctx, simulator, self.simulator_version())
            if capped := [s.id for s in sessions if s.capped]:
                log.warning(
                    "%d sessions were cut to evaluator.max_turns=%d (their scenarios ask for more turns; first: %s)",
                    len(capped),
                    ev.max_turns,
                    capped[0],
                )
            results: dict[str, Any] = {
                "n_records": len(sessions),
                "generation": generation,
                "resumed": resumed,
                "simulator_model": simulator.config.model,
                "simulator_usage": simulator.stats.as_dict(),
                "endpoints": {"simulator": simulator_health(resumed, ctx.judge.warn_request_failure_rate)},
            }
            policy = (ctx.model_config.family, ctx.model_config.name)
            judge_and_summarise(ctx, client, sessions, results, ev.max_turns, policy)
        results["report_sections"] = report_sections(results)
        if ctx.logger is not None:
            ctx.logger.log_metrics(
                {
                    f"eval/conversation/{d}": v["mean"]
                    for d, v in results["conversation"]["judge"].items()
                    if v["mean"] is not None
                }
            )
        return results

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        """The session judgements, by each judge of the ensemble (sessions cut short or failing a simulator check are
        not judged)."""
        c = results["conversation"]
        judges = c["ensemble"]["n_judges"] if "ensemble" in c else 1
        left_out = sum(c["sessions_cut_short"].values()) + c["simulator_checks"]["sessions_failed"]
        judged = (c["sessions"] - left_out) * judges
        return JudgeTally(judged, c["judge_parse_failures"], c["judge_request_failures"])


def judge_complete(
    client: Any,
    sessions: Sequence[Session],
    records: Sequence[Mapping[str, Any]],
    rubric: Mapping[str, str],
    max_tokens: int,
) -> list[dict[str, Any]]:
    """Each session's judgement; a session cut short (``Session.cut_short``) or failing a simulator check
    (``Session.failed_checks``) is not judged (its status: how it ended, or ``simulator_check``; no scores): it
    is no whole conversation, or not one with a user as the scenario asks, and is counted beside the means."""
    complete = [r for s, r in zip(sessions, records) if not s.left_out]
    judged = iter(judge_sessions(client, complete, rubric, max_tokens) if complete else [])
    unjudged = {"scores": dict.fromkeys(rubric), "breaks": [], "breaks_out_of_range": 0, "reply": None, "attempts": 0}
    status = {s.id: s.ended_by if s.cut_short else "simulator_check" for s in sessions if s.left_out}
    return [next(judged) if not s.left_out else {"id": s.id, "status": status[s.id], **unjudged} for s in sessions]


def judge_and_summarise(
    ctx: EvalContext,
    client: Any,
    sessions: Sequence[Session],
    results: dict[str, Any],
    max_turns: int,
    policy: tuple[str | None, str],
) -> None:
    """``sessions`` checked (``evaluator.simulator_checks``), those passing judged (by ``client``, or by each
    judge of ``evaluator.judges``), all measured without a judge, and compared pairwise with
    ``evaluator.pairwise_with``'s: simulator_checks.jsonl, judgements.jsonl, scores.jsonl, flags.jsonl (and
    pairwise.jsonl) written; the judges and the summaries (``conversation``, ``metrics``, ``compare``) added to
    ``results``, and a judge of the policy's family (``policy``: its family and name) measured against the others
    (``self_preference``, its warnings in ``warnings``). Shared by simulated and re-judged sessions (``rejudge``)."""
    from rpbench.eval.evaluate import compare

    ev, out_dir = ctx.settings, ctx.out_dir
    checked = check_simulator(ev, sessions, out_dir)  # a failing session is not judged
    records = [s.record() for s in sessions]
    max_tokens, bootstrap, dimensions = ev.judge_max_tokens, ev.bootstrap.as_kwargs(), list(ev.rubric)
    if ev.judges:  # every judge of the ensemble scores every session
        each = ask_each(ctx, lambda c: judge_complete(c, sessions, records, ev.rubric, max_tokens))
        judgements, ensemble = judge_ensemble(each, dimensions, bootstrap)
        write_jsonl(out_dir / "judgements.jsonl", named_rows(each))
        by_judge = {name: [r["scores"] for r in rows] for name, (rows, _) in each.items()}
    else:
        judgements = judge_complete(client, sessions, records, ev.rubric, max_tokens)
        write_jsonl(out_dir / "judgements.jsonl", judgements)
        by_judge = {client.config.model: [j["scores"] for j in judgements]}
    compared_by_judge = None
    if ev.pairwise_with:
        other = read_other(ev.pairwise_with, records)
        failed = failed_check_ids(ev.pairwise_with) | {s.id for s in sessions if s.failed_checks}

        def ask(c: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
            return judge_pairwise(c, records, other, ev.rubric, max_tokens, bootstrap, failed)

        if ev.judges:
            asked = ask_each(ctx, ask)
            pairwise, compared = pairwise_ensemble(asked, dimensions, bootstrap)
            compared_by_judge = {name: rows for name, ((_, rows), _) in asked.items()}
        else:
            pairwise, compared = ask(client)
            pairwise["flip_rate"] = flip_rate(compared, dimensions)
            compared_by_judge = {client.config.model: compared}
        pairwise["against"] = Path(ev.pairwise_with).name
        write_jsonl(out_dir / "pairwise.jsonl", compared)
    configs = ensemble_configs(ctx.judge, ev.judges)
    results["judge_model"] = ", ".join(ensemble["judges"]) if ev.judges else client.config.model
    results["judge_usage"] = client.stats.as_dict()
    results["session_judges"] = [judge_record(c, ev.rubric) for c in configs]
    measured = measure(ev, sessions)
    scores = [
        {"id": s.id, "task": s.example.task, "metrics": measured[s.id]["metrics"], "verdicts": j["scores"]}
        | ({"verdicts_by_judge": j["by_judge"]} if ev.judges else {})
        for s, j in zip(sessions, judgements)
    ]
    write_jsonl(out_dir / "scores.jsonl", scores)
    flags = [{"id": s.id, "flags": turn_flags(j, measured[s.id])} for s, j in zip(sessions, judgements)]
    write_jsonl(out_dir / "flags.jsonl", flags)
    results["conversation"] = summaries(replace(ev, max_turns=max_turns), sessions, judgements, measured, flags)
    results["conversation"]["simulator_checks"] = checked
    if ev.judges:
        attach_ensemble(results["conversation"], ensemble)
    if ev.pairwise_with:
        results["conversation"]["pairwise"] = pairwise
    parties = judge_parties(ctx.judge, ev.judges)
    preference = self_preference_of_run(by_judge, compared_by_judge, parties, policy, dimensions, bootstrap)
    if preference is not None:
        results["conversation"]["self_preference"] = preference
        results["warnings"] = preference["warnings"]
        for warning in preference["warnings"]:
            log.warning(warning)
    results["metrics"] = {"overall": {f"judge/{d}": v for d, v in results["conversation"]["judge"].items()}}
    if ev.compare_to:
        results["compare"] = compare(ev, scores)
    if sessions and all(s.left_out for s in sessions):  # why the scores are empty, for the run's failure
        c = results["conversation"]
        results["failed"] = (
            f"none of the {len(sessions)} sessions was judged: {cut_short(c['sessions_cut_short'])}, "
            f"{failed_checks(checked)} (simulator_checks.jsonl)"
        )


def simulator_health(counts: Mapping[str, int], limit: float) -> dict[str, Any]:
    """The user simulator's ``role_health``: its replies asked and unusable (failed, or empty) over the run, held
    to the judge's request failure threshold (it is asked with the judge's client settings)."""
    from rpbench.scoring.chat.health import role_health

    requests, failures = counts["simulator_requests"], counts["simulator_failures"]
    return role_health("simulator", requests, failures, limit, "judge.warn_request_failure_rate")


def measure(ev: ConversationSettings, sessions: Sequence[Session]) -> dict[str, dict[str, Any]]:
    """Per session: drift (when enabled) and OOC phrases per character turn, and its judge-free metrics."""
    model = load_encoder(ev.drift.encoder)[0] if ev.drift.enabled else None
    out = {}
    for s in sessions:
        replies = [m["text"] for m in s.messages if m["role"] == "character"]
        ooc = [ooc_hits(r, ev.ooc_phrases) for r in replies]
        metrics: dict[str, Any] = {"ooc_phrases": sum(sum(h.values()) for h in ooc), "character_turns": len(replies)}
        drift = session_drift(model, s.example.meta["card"], replies, ev.drift.batch_size) if model else None
        if drift is not None:
            metrics.update({k: drift[k] for k in DRIFT_METRICS})
        out[s.id] = {"metrics": metrics, "ooc": ooc, "similarity": drift["similarity"] if drift else None}
    return out


def turn_flags(judgement: Mapping[str, Any], measured: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Where a character broke: the judge's breaks and the turns with OOC phrases, by turn."""
    found = [{"turn": b["turn"], "by": "judge", "reason": b["reason"]} for b in judgement["breaks"]]
    found += [
        {"turn": turn, "by": "ooc_phrases", "reason": ", ".join(sorted(hits))}
        for turn, hits in enumerate(measured["ooc"], start=1)
        if hits
    ]
    return sorted(found, key=lambda f: (f["turn"], f["by"]))


def summaries(
    ev: ConversationSettings,
    sessions: Sequence[Session],
    judgements: Sequence[Mapping[str, Any]],
    measured: Mapping[str, Mapping[str, Any]],
    flags: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    bootstrap = ev.bootstrap.as_kwargs()
    dimensions = list(ev.rubric)
    judge = {d: summarize([j["scores"][d] for j in judgements], **bootstrap) for d in dimensions}
    overall = [
        None if None in j["scores"].values() else sum(j["scores"].values()) / len(dimensions) for j in judgements
    ]
    judge["overall"] = summarize(overall, **bootstrap)
    statuses = Counter(j["status"] for j in judgements)
    phrase_counts: Counter[str] = Counter()
    for m in measured.values():
        for hits in m["ooc"]:
            phrase_counts.update(hits)
    out: dict[str, Any] = {
        "sessions": len(sessions),
        "ended_by": dict(Counter(s.ended_by for s in sessions)),
        "simulator_errors": {s.id: s.error for s in sessions if s.error is not None},
        # left out of the judge's means (not judged), counted here by how they ended
        "sessions_cut_short": dict(Counter(s.ended_by for s in sessions if s.cut_short)),
        "sessions_capped": sum(s.capped for s in sessions),
        "max_turns": ev.max_turns,
        "character_turns": summarize([s.character_turns for s in sessions], **bootstrap),
        "judge": judge,
        "scale": "1 (poor) to 5 (excellent), one judgement per session",
        "judge_parse_failures": statuses["parse_failure"],
        "judge_request_failures": statuses["request_failure"],
        "breaks_out_of_range": sum(j["breaks_out_of_range"] for j in judgements),
        "sessions_flagged": sum(bool(f["flags"]) for f in flags),
        "flags_by_turn": dict(sorted(Counter(f["turn"] for row in flags for f in row["flags"]).items())),
        "ooc": {
            "phrases": summarize([m["metrics"]["ooc_phrases"] for m in measured.values()], **bootstrap),
            "by_phrase": dict(phrase_counts.most_common()),
        },
    }
    if ev.drift.enabled:
        out["drift"] = {k: summarize([m["metrics"][k] for m in measured.values()], **bootstrap) for k in DRIFT_METRICS}
        out["drift"]["encoder"] = load_encoder(ev.drift.encoder)[1]
        out["drift"]["empty_replies"] = sum(s is None for m in measured.values() for s in m["similarity"])
    return out


def _cell(s: Mapping[str, Any], digits: int = 2) -> str:
    if s["mean"] is None:
        return "-"
    return f"{s['mean']:.{digits}f} [{s['ci_low']:.{digits}f}, {s['ci_high']:.{digits}f}] (n={s['n']})"


def cut_short(by_cause: Mapping[str, int]) -> str:
    """The sessions cut short, with their causes: ``3 sessions cut short (simulator_error 3)``."""
    causes, n = ", ".join(f"{cause} {n}" for cause, n in by_cause.items()), sum(by_cause.values())
    return f"{n} session{'' if n == 1 else 's'} cut short" + (f" ({causes})" if causes else "")


def report_sections(results: Mapping[str, Any]) -> list[str]:
    c = results["conversation"]
    rows = "\n".join(f"| {d} | {_cell(s)} |" for d, s in c["judge"].items())
    text = (
        f"## Conversations (judge `{results['judge_model']}`, user simulator `{results['simulator_model']}`)\n\n"
        f"{c['sessions']} sessions, ended by: "
        + ", ".join(f"{k} {v}" for k, v in c["ended_by"].items())
        + f"; character turns {_cell(c['character_turns'])}.\n\n"
        f"Scores {c['scale']}: mean [95% bootstrap CI].\n\n| dimension | score |\n| --- | --- |\n{rows}\n\n"
        f"Left out of the means: {cut_short(c['sessions_cut_short'])} (not judged); "
        f"{failed_checks(c['simulator_checks'])} (not judged); "
        f"judge failures {c['judge_parse_failures']} unparsed, {c['judge_request_failures']} unanswered. "
        f"Sessions cut to evaluator.max_turns={c['max_turns']}: {c['sessions_capped']}. "
        f"Sessions with a flagged turn: {c['sessions_flagged']} "
        f"(by turn: {c['flags_by_turn'] or 'none'}).\n\n"
        f"Out-of-character phrases per session: {_cell(c['ooc']['phrases'])}.\n\n"
        + checks_section(c["simulator_checks"])
    )
    if "drift" in c:
        d = c["drift"]
        text += (
            f"\n\nPersona drift (`{d['encoder']}`): similarity of replies to the card "
            f"{_cell(d['mean_similarity'], 3)}; "
            f"slope per turn {_cell(d['drift_slope'], 4)}; empty replies (no similarity): {d['empty_replies']}."
        )
    if "pairwise" in c:
        p = c["pairwise"]
        rows = "\n".join(f"| {d} | {_cell(s)} | {s['position_inconsistent']} |" for d, s in p["dimensions"].items())
        text += (
            f"\n\nPairwise against `{p['against']}` ({p['shared_sessions']} shared sessions, both orders; "
            f"{p['cut_short']} more left out, cut short in either run, and {p['failed_checks']} failing a simulator "
            "check in either run; "
            f"{p['parse_failures']} unparsed, {p['request_failures']} unanswered): this run's win rate (win 1, "
            "tie 0.5), and the sessions whose two orders disagree.\n\n| dimension | win rate | position-inconsistent |"
            f"\n| --- | --- | --- |\n{rows}"
        )
    text += ensemble_report(c)
    if "self_preference" in c:
        sp = c["self_preference"]
        text += self_preference_report({k: sp[k] for k in ("scores", "win_rates") if k in sp})
    if c["simulator_errors"]:
        text += "\n\nSessions cut short by the simulator: " + "; ".join(
            f"{k}: {v}" for k, v in c["simulator_errors"].items()
        )
    return [text]


BENCHMARKS.register("conversation")(Conversation())
