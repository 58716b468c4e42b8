"""CoSER given-circumstance acting (``evaluator=coser``; Wang et al. 2025, Neph0s/CoSER): the evaluated model plays
one character of a book scene (``data=coser``); the scene's other characters, its environment and the
next-speaker step are other models (OpenAI-compatible endpoints, ``evaluator.simulator``, ``.environment``,
``.next_speaker``); then the judge compares the simulated scene with the original, one request per dimension,
listing flaws whose severities become a 0-100 score with the authors' length correction
(``rpbench.scoring.judge.coser``).

- The loop is ``evaluator=conversation``'s (``conversation.sessions.run_sessions``): batched across scenes, one
  generation call per turn of the evaluated character, resumed after a kill from the same files
  (predictions_turn_<t>.jsonl, simulator_turn_<t>.jsonl, conversations.jsonl); what answers the character is
  the scene step (``scene.ScenePlayers``) instead of a simulated user. A scene whose first speaker is another
  party opens with its message (simulator_turn_0.jsonl).
- Judging: judgements.jsonl, one line per scene and dimension, appended as answered and resumed under the
  judge's fingerprint. A reply that does not parse (after ``judge.parse_tries``) or a failed request is counted
  and left out of the means, never scored 0; a scene cut short (a failed request of the evaluated model or of a
  scene party) is counted and not judged.
- Results per split (test, ood): each dimension's mean with a bootstrap CI, ``average`` (the mean of the four
  means, the authors' headline) and the per-scene average's mean with its CI.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.distributed import rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.core.typed import Problem, Settings
from rpbench.data.conversation_session import Session
from rpbench.data.coser import SPLITS, scene_text
from rpbench.data.coser_prompts import ENVIRONMENT, START_CUE, CoserPrompts
from rpbench.data.records import EvalExample, Turn
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, JudgeTally
from rpbench.eval.benchmarks.conversation.sessions import read_appended, run_sessions, session_fingerprint, simulate
from rpbench.eval.benchmarks.coser.scene import ScenePlayers, judged_lines
from rpbench.eval.context import EvalContext
from rpbench.eval.provenance import claim
from rpbench.eval.report import scored_table
from rpbench.eval.settings import JudgedSettings
from rpbench.eval.stats import summarize
from rpbench.models.settings import ModelSettings
from rpbench.scoring.chat.client import ChatRequest, EndpointSettings
from rpbench.scoring.judge.conversation import Simulator, open_simulator, simulator_key_problems
from rpbench.scoring.judge.coser import DIMENSIONS, dimension_score, parse_flaws, session_average
from rpbench.scoring.judge.parties import Overlap, Party, family_overlaps, judge_party, overlaps, simulator_party

log = logging.getLogger(__name__)

PARTIES = {
    "simulator": "the other characters (evaluator.simulator)",
    "environment": "the environment (evaluator.environment)",
    "next_speaker": "the next-speaker step (evaluator.next_speaker)",
}
REASK = "Answer now with the JSON object only: the dimension's list of flaws, each with its severity."


@dataclass(frozen=True, kw_only=True)
class CoserSettings(JudgedSettings):
    max_turns: int
    simulator: Simulator  # the other characters; its stop_marker ends a scene in the session loop
    environment: Simulator
    next_speaker: Simulator
    min_rounds: int  # messages before the next-speaker step may end the scene
    allow_shared_judge: bool  # one model as a scene party and as the judge

    needs_metrics = False  # judged alone

    def problems(self) -> list[Problem]:
        found = super().problems()
        found += [] if self.max_turns >= 1 else [("max_turns", "an integer >= 1")]
        return found + ([] if self.min_rounds >= 0 else [("min_rounds", "an integer >= 0")])


class Coser(Benchmark):
    headlines = (Headline("CoSER GCA average (0-100), test", ("coser", "test", "average"), value=""),)
    judged = True
    settings_class = CoserSettings

    def judge_requests(self, settings: Settings, examples: Sequence[EvalExample]) -> list[int]:
        """Per scene: the four judgements and, at most, two requests (a pick and a message) per message of the
        scene's other parties."""
        return [len(DIMENSIONS) + 2 * e.meta["turns"] for e in examples]

    def reaskable_requests(self, settings: Settings, examples: Sequence[EvalExample]) -> list[int]:
        return [len(DIMENSIONS)] * len(examples)

    def problems(self, settings: Settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        out = [] if judge is not None else ["evaluator=coser needs a judge: judge=openai|local|vllm|..."]
        if data.format != "coser":
            out.append(f"evaluator=coser reads data=coser (format coser), got {data.format}")
        for name in PARTIES:
            out += simulator_key_problems(getattr(settings, name), f"evaluator.{name}")
        return out

    def overlaps(
        self, settings: Settings, judge: EndpointSettings | None, model: ModelSettings, trained_by: Sequence[Party]
    ) -> list[Overlap]:
        """A scene party and the judge, or the judge and a judge that rewarded the evaluated model's training,
        played by one model (allowed by ``evaluator.allow_shared_judge``); a judge of the evaluated model's family
        (a warning)."""
        if judge is None:
            return []
        this = judge_party(judge, "the judge (judge)")
        parties = [simulator_party(getattr(settings, name), judge, part) for name, part in PARTIES.items()]
        pairs = [*((party, this) for party in parties), *((this, rewarding) for rewarding in trained_by)]
        found = overlaps(pairs, "evaluator.allow_shared_judge", settings.allow_shared_judge)
        remedy = "CoSER has one judge: choose one of another family to avoid it"
        return found + family_overlaps([this], model.family, model.name, remedy)

    def evaluate_model(self, ctx: EvalContext) -> dict[str, Any]:
        if rank_and_world()[1] > 1:
            raise ConfigError("evaluator=coser runs in one process: evaluate with trainer.devices=1")
        ev = ctx.settings
        prompts = CoserPrompts.load(ctx.data.prompts_source)
        with ctx.open_client() as client, ExitStack() as stack:
            clients = {
                name: stack.enter_context(
                    open_simulator(client, getattr(ev, name), ctx.local_judge_server, f"evaluator.{name}")
                )
                for name in PARTIES
            }
            version = scene_version(prompts, clients)
            players = ScenePlayers(
                clients["simulator"],
                clients["environment"],
                clients["next_speaker"],
                ev,
                prompts,
                version,
                ev.simulator.stop_marker,
                ctx.data.options.max_rounds,
            )
            fingerprint = session_fingerprint(ctx, clients["simulator"], version)
            remember_steps(players, ctx.out_dir, ctx.examples, fingerprint)
            examples, opening_failures = openings(ctx, players, fingerprint)
            sessions, generation, resumed = run_sessions(ctx, clients["simulator"], version, players, examples)
            steps = read_steps(ctx.out_dir, {e.id for e in ctx.examples})
            judgements = judge_scenes(ctx, client, prompts, players, sessions, fingerprint)
        results: dict[str, Any] = {
            "n_records": len(ctx.examples),
            "generation": generation,
            "resumed": resumed,
            "judge_model": client.config.model,
            "parties": {name: c.config.model for name, c in clients.items()},
            "party_usage": {name: c.stats.as_dict() for name, c in clients.items()},
            "next_speaker_invalid": sum(r.get("next_speaker_invalid", 0) for r in steps),
            "opening_failures": opening_failures,
            "prompts": prompts.record(),
            "coser": summaries(ctx.examples, sessions, opening_failures, judgements, ev.bootstrap.as_kwargs()),
        }
        results["report_sections"] = report_sections(results)
        return results

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        splits = results["coser"].values()
        n = sum(t["judged_scenes"] for t in splits) * len(DIMENSIONS)
        parse = sum(d["parse_failures"] for t in splits for d in t["dimensions"].values())
        request = sum(d["request_failures"] for t in splits for d in t["dimensions"].values())
        return JudgeTally(n, parse, request)


def scene_version(prompts: CoserPrompts, clients: Mapping[str, Any]) -> str:
    """What the scene step's replies are resumed under: its templates and who plays each party."""
    parties = {name: [c.endpoint, c.config.model, c.config.temperature] for name, c in clients.items()}
    text = json.dumps({"prompts": prompts.record(), "parties": parties}, sort_keys=True)
    return f"coser-scene-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def turn_files(out_dir: Path) -> list[Path]:
    """The scene steps' files of this run (not the ones set aside)."""
    return sorted(p for p in out_dir.glob("simulator_turn_*.jsonl") if p.stem.rsplit("_", 1)[1].isdigit())


def read_steps(out_dir: Path, ids: set[str]) -> list[dict[str, Any]]:
    """Every scene step written so far (the turn files)."""
    out = []
    for path in turn_files(out_dir):
        turn = int(path.stem.rsplit("_", 1)[1])
        keys = {f"{i}#user{turn + 1}" for i in ids}
        out += read_appended(path, keys).values()
    return out


def remember_steps(players: ScenePlayers, out_dir: Path, examples: Sequence[EvalExample], fingerprint: Any) -> None:
    """The steps an earlier run wrote under this fingerprint (others are set aside by ``claim``)."""
    for path in turn_files(out_dir):
        claim(path, fingerprint)
    ids = {e.id for e in examples}
    players.remember({r["id"]: r for r in read_steps(out_dir, ids) if r.get("error") is None})


def openings(ctx: EvalContext, players: ScenePlayers, fingerprint: Any) -> tuple[list[EvalExample], dict[str, str]]:
    """The scenes as the session loop starts them: a scene whose first speaker is another party opens with that
    party's message (turn 0); one whose opening failed is left out (by id: the error)."""
    first = [e for e in ctx.examples if e.meta["speakers"][0] != e.meta["character"]]
    starts = [Session.start(e, ctx.settings.max_turns) for e in first]
    answers = simulate(players, starts, 0, ctx.out_dir / "simulator_turn_0.jsonl", fingerprint) if starts else {}
    failed = {i: a["error"] for i, a in answers.items() if a["error"] is not None}
    out = []
    for e in ctx.examples:
        if e.id in failed:
            continue
        if e.id in answers:
            text = answers[e.id]["text"].replace(ctx.settings.simulator.stop_marker, "").strip()
            e = replace(e, prompt=(*e.prompt[:-1], Turn("user", f"{START_CUE}\n\n{text}".strip())))
        out.append(e)
    return out, failed


def judge_scenes(
    ctx: EvalContext,
    client: Any,
    prompts: CoserPrompts,
    players: ScenePlayers,
    sessions: Sequence[Session],
    fingerprint: Mapping[str, Any],
) -> dict[str, dict[str, Any]]:
    """Each judged scene's verdict per dimension, by ``<id>#<dimension>`` (judgements.jsonl, resumed)."""
    judged = [s for s in sessions if not s.left_out]
    path = ctx.out_dir / "judgements.jsonl"
    judge_print = {
        **fingerprint,
        "judge.endpoint": client.endpoint,
        "judge.model": client.config.model,
        "judge.prompts": {k: v["sha256"] for k, v in prompts.record().items()},
    }
    claim(path, judge_print)
    keys = {f"{s.id}#{d}": (s, d) for s in judged for d in DIMENSIONS}
    done = read_appended(path, keys)
    for d in DIMENSIONS:
        todo = [(key, s) for key, (s, dim) in keys.items() if dim == d and key not in done]
        if not todo:
            continue
        lines = {s.id: judged_lines(players.scene(s)) for _, s in todo}
        requests = [
            ChatRequest(
                (
                    {"role": "system", "content": judge_prompt(prompts, s.example, d)},
                    {"role": "user", "content": scene_text_raw(lines[s.id])},
                ),
                ctx.settings.judge_max_tokens,
                "coser-judge",
            )
            for _, s in todo
        ]
        replies = client.ask_parsed(requests, lambda text, d=d: parse_flaws(text, d), REASK, desc=f"judge ({d})")
        with path.open("a", encoding="utf-8") as f:
            for (key, s), reply in zip(todo, replies):
                messages = sum(sp != ENVIRONMENT for sp, _ in lines[s.id])
                score = None if reply.value is None else dimension_score(reply.value, messages)
                done[key] = {
                    "id": key,
                    "status": reply.status,
                    "severities": reply.value,
                    "character_messages": messages,
                    "score": score,
                    "reply": reply.text,
                    "error": reply.error,
                    "attempts": reply.attempts,
                }
                f.write(json.dumps(done[key], ensure_ascii=False) + "\n")
    return done


def scene_text_raw(lines: Sequence[tuple[str, str]]) -> str:
    """The simulated scene the judge reads: ``<speaker>: <text>`` a blank line apart (thoughts already removed)."""
    return "\n\n".join(f"{speaker}: {text}" for speaker, text in lines)


def judge_prompt(prompts: CoserPrompts, e: EvalExample, dimension: str) -> str:
    meta = e.meta
    profiles = "\n\n".join(f"### {name}\n\n{profile}" for name, profile in meta["profiles"].items())
    original = scene_text([(t["character"], t["message"]) for t in meta["dialogues"]])
    return prompts.judge_prompt(
        dimension,
        book=meta["book"],
        major_characters=", ".join(meta["major_characters"]),
        additional_instructions="",
        plot_summary=meta["plot_summary"],
        scenario=meta["scenario"],
        character_profiles=profiles,
        original_conversation=original,
    )


def summaries(
    examples: Sequence[EvalExample],
    sessions: Sequence[Session],
    opening_failures: Mapping[str, str],
    judgements: Mapping[str, Mapping[str, Any]],
    bootstrap: Mapping[str, Any],
) -> dict[str, Any]:
    """Per split: scenes, those cut short (by cause) and judged; per dimension the scores' summary with its
    failures; ``average`` (the mean of the dimension means) and ``scene_average`` (per scene, then summarised)."""
    by_id = {s.id: s for s in sessions}
    out: dict[str, Any] = {}
    for split in SPLITS.values():
        ids = [e.id for e in examples if e.task == split]
        if not ids:
            continue
        cut = Counter(by_id[i].ended_by for i in ids if i in by_id and by_id[i].left_out)
        cut.update({"opening_error": sum(i in opening_failures for i in ids)} if opening_failures else {})
        judged = [i for i in ids if i in by_id and not by_id[i].left_out]
        dims = {}
        for d in DIMENSIONS:
            verdicts = [judgements[f"{i}#{d}"] for i in judged]
            summary = summarize([v["score"] for v in verdicts], **bootstrap)
            summary["parse_failures"] = sum(v["status"] == "parse_failure" for v in verdicts)
            summary["request_failures"] = sum(v["status"] == "request_failure" for v in verdicts)
            dims[d] = summary
        means = [dims[d]["mean"] for d in DIMENSIONS]
        scene_scores = [session_average({d: judgements[f"{i}#{d}"]["score"] for d in DIMENSIONS}) for i in judged]
        out[split] = {
            "scenes": len(ids),
            "judged_scenes": len(judged),
            "cut_short": {k: v for k, v in cut.items() if v},
            "dimensions": dims,
            "average": None if None in means else sum(means) / len(means),
            "scene_average": summarize(scene_scores, **bootstrap),
        }
    return out


def report_sections(results: Mapping[str, Any]) -> list[str]:
    splits = results["coser"]
    rows = {s: (f"{t['judged_scenes']}/{t['scenes']}", t["dimensions"], t["average"]) for s, t in splits.items()}
    table, left_out = scored_table(("split", "scenes judged"), rows, {d: d for d in DIMENSIONS}, digits=2)
    cut = [f"{split}: {dict(t['cut_short'])}" for split, t in splits.items() if t["cut_short"]]
    text = (
        f"## CoSER given-circumstance acting (judge `{results['judge_model']}`)\n\n"
        "Scores 0-100 (flaw severities with the authors' length correction), mean [95% bootstrap CI]; average: the "
        "mean of the four (the authors' headline). Scores comparable with the paper's need the judge "
        "gpt-4o-2024-08-06.\n\n" + table
    )
    if left_out:
        text += "\n\n" + left_out
    if cut:
        text += "\n\nScenes cut short (not judged): " + "; ".join(cut)
    return [text]


BENCHMARKS.register("coser")(Coser())
