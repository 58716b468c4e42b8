"""RMTBench (Xiang et al. 2025): user-centric multi-turn role-play, bilingual, judged on seven dimensions.

``data=rmtbench`` reads the released dialogues (``rpbench.data.rmtbench``): each holds the user's turns only.
The model plays the character through each dialogue: at turn t it sees the character's system prompt, the
user's turns 1..t and its own replies to turns 1..t-1 (predictions_turn_<t>.jsonl, resumable: a re-run in the
same folder generates only what is missing, on the same history); ``evaluator.max_turns`` cuts long ones
(counted as ``truncated``; empty replies as ``empty_replies``). The dialogues go to dialogues.jsonl.

The judge (any endpoint, ``judge=...``) scores each whole dialogue once per dimension that its scenario is
judged on (``evaluator.dimensions``), from 1 to ``evaluator.score_max``, with ``rmtbench_prompts``' wording
(``prompts.source``: the user's own text files). The score is the last ``评分：N`` / ``Score: N`` of the reply
(full-width forms read), else a whole number alone on its last line; none in 1..score_max is re-asked up to
``judge.parse_tries``, then a parse failure, counted and left out of the means.

Per language: each dimension's mean with a bootstrap CI, each scenario's per dimension, and the overall
score (the mean of the dimension means): "RMTBench overall", the headline.

What is assumed, as neither the paper nor the release pins it for rpbench (no code or prompts released):
the whole-dialogue judgement (not one per turn), the 1-5 scale, which dimensions each scenario is judged on
(conf/evaluator/rmtbench.yaml), that user-preference questions follow their chat as the last user turns and
their answers are the judge's reference, and the overall score as the unweighted mean of dimensions.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rpbench.core.distributed import rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.data.records import EvalExample, Turn
from rpbench.data.rmtbench_prompts import DIMENSIONS, LANGUAGES, SCENARIOS, RMTBenchPrompts
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, JudgeTally, read_jsonl, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import JudgedSettings
from rpbench.eval.stats import summarize
from rpbench.scoring.chat.client import EndpointSettings

LABELLED = re.compile(r"(?:评分|分数|得分|score|rating)\s*[:：]\s*(\d+)", re.IGNORECASE)
BARE = re.compile(r"^\s*(\d+)\s*$")
REASK = "Give your score now: a whole number, alone on the last line as 'Score: N'."
SPEAKER = {"zh": ("用户", "："), "en": ("User", ": ")}
NONE = {"zh": "无", "en": "(none)"}


def parse_score(text: str, top: int) -> int | None:
    """The last labelled score in the reply, else a number alone on its last line; None outside 1..``top``."""
    text = unicodedata.normalize("NFKC", text)
    found = LABELLED.findall(text)
    lines = [line for line in text.strip().split("\n") if line.strip()]
    bare = BARE.match(lines[-1]) if lines else None
    score = int(found[-1]) if found else int(bare.group(1)) if bare else None
    return score if score is not None and 1 <= score <= top else None


@dataclass(frozen=True, kw_only=True)
class RMTBenchSettings(JudgedSettings):
    max_turns: int | None  # null: every user turn
    score_max: int
    dimensions: Mapping[str, tuple[str, ...]]  # scenario -> the dimensions its dialogues are judged on

    needs_metrics = False  # judged alone

    def problems(self):
        found = super().problems()
        if self.max_turns is not None and self.max_turns < 1:
            found.append(("max_turns", "null or an integer >= 1"))
        if self.score_max < 2:
            found.append(("score_max", "an integer >= 2"))
        bad = [s for s in self.dimensions if s not in SCENARIOS] + [
            d for dims in self.dimensions.values() for d in dims if d not in DIMENSIONS
        ]
        if bad or not all(self.dimensions.values()):
            found.append(
                ("dimensions", f"scenario ({', '.join(SCENARIOS)}) -> non-empty list of ({', '.join(DIMENSIONS)})")
            )
        return found


class RMTBench(Benchmark):
    headlines = tuple(
        Headline(f"RMTBench overall ({lang})", ("rmtbench", lang), "overall", needs=f"{lang} in data.languages")
        for lang in LANGUAGES
    )
    judged = True
    settings_class = RMTBenchSettings

    def judge_requests(self, settings: RMTBenchSettings, examples: Sequence[EvalExample]) -> list[int]:
        return [len(settings.dimensions.get(e.task, ())) for e in examples]

    def problems(self, settings: Settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        out = []
        if judge is None:
            out.append("evaluator=rmtbench is scored by a judge: choose judge=openai|vllm|local|...")
        if data.format != "rmtbench":
            out.append(f"evaluator=rmtbench reads data=rmtbench (format rmtbench), got {data.format}")
        return out

    def evaluate_model(self, ctx: EvalContext) -> dict[str, Any]:
        if rank_and_world()[1] > 1:
            raise ConfigError("evaluator=rmtbench runs in one process: evaluate with trainer.devices=1")
        ev = ctx.settings
        records = list(ctx.examples)
        unjudged = sorted({e.task for e in records} - set(ev.dimensions))
        if unjudged:
            raise ConfigError(f"evaluator.dimensions names no dimension for scenario(s) {', '.join(unjudged)}")
        prompts = RMTBenchPrompts.load(ctx.prompts_source)
        results: dict[str, Any] = {"n_dialogues": len(records), "generation": {}}
        transcripts = converse(ctx, records, results)
        dialogues = [
            {
                "id": e.id,
                "language": e.meta["language"],
                "scenario": e.task,
                "character": e.meta["character"],
                "turns": [{"user": u, "character": c} for u, c in transcripts[e.id]],
                "truncated": len(transcripts[e.id]) < len(e.meta["user_turns"]),
            }
            for e in records
        ]
        write_jsonl(ctx.out_dir / "dialogues.jsonl", dialogues)
        with ctx.open_client() as client:
            judgements = judge(client, prompts, records, transcripts, ev)
            results["judge_usage"] = client.stats.as_dict()
            results["judge_model"] = client.config.model
        write_jsonl(ctx.out_dir / "judgements.jsonl", judgements)
        verdicts: dict[str, dict[str, int | None]] = {e.id: {} for e in records}
        for j in judgements:
            verdicts[j["id"]][j["dimension"]] = j["score"]
        write_jsonl(
            ctx.out_dir / "scores.jsonl",
            [{"id": e.id, "task": e.task, "metrics": {}, "verdicts": verdicts[e.id]} for e in records],
        )
        results["rmtbench"] = aggregate(judgements, ev.bootstrap.as_kwargs())
        results["truncated"] = sum(d["truncated"] for d in dialogues)
        results["empty_replies"] = sum(not reply for pairs in transcripts.values() for _, reply in pairs)
        results["score_max"] = ev.score_max
        results["prompts"] = prompts.record()
        results["metrics"] = {
            "overall": {f"{lang}/{d}": s for lang, t in results["rmtbench"].items() for d, s in t["dimensions"].items()}
        }
        results["report_sections"] = report_sections(results)
        return results

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        if "rmtbench" not in results:
            return None
        dims = [s for t in results["rmtbench"].values() for s in t["dimensions"].values()]
        parse, request = (sum(s[k] for s in dims) for k in ("parse_failures", "request_failures"))
        return JudgeTally(sum(s["n"] for s in dims) + parse + request, parse, request)


def converse(ctx: EvalContext, records: Sequence[EvalExample], results: dict[str, Any]) -> dict[str, list]:
    """Each dialogue's (user turn, model reply) pairs: turn by turn, the model's own replies in its history."""
    from rpbench.eval.evaluate import generate

    limit = max(len(e.meta["user_turns"]) for e in records)
    if ctx.settings.max_turns is not None:
        limit = min(limit, ctx.settings.max_turns)
    transcripts: dict[str, list[tuple[str, str]]] = {e.id: [] for e in records}
    for turn in range(1, limit + 1):
        active = [e for e in records if len(e.meta["user_turns"]) >= turn]
        asked = [replace(e, id=f"{e.id}#turn{turn}", prompt=history(e, transcripts[e.id], turn)) for e in active]
        path = ctx.out_dir / f"predictions_turn_{turn}.jsonl"
        results["generation"][f"turn_{turn}"] = generate(ctx, asked, path, f"rmtbench replies, turn {turn}")
        replies = {row["id"]: row["prediction"] for row in read_jsonl(path)}
        for e, record in zip(active, asked):
            transcripts[e.id].append((e.meta["user_turns"][turn - 1], replies[record.id].strip()))
    return transcripts


def history(e: EvalExample, transcript: Sequence[tuple[str, str]], turn: int) -> tuple[Turn, ...]:
    """The model's prompt at ``turn``: the system prompt, the exchanges so far, the user's next turn."""
    past = [t for user, reply in transcript for t in (Turn("user", user), Turn("assistant", reply))]
    return (e.prompt[0], *past, Turn("user", e.meta["user_turns"][turn - 1]))


def judge(
    client: Any,
    prompts: RMTBenchPrompts,
    records: Sequence[EvalExample],
    transcripts: Mapping[str, Sequence[tuple[str, str]]],
    ev: RMTBenchSettings,
) -> list[dict[str, Any]]:
    """One judgement per (dialogue, dimension of its scenario)."""
    from rpbench.scoring.chat import ChatRequest

    jobs, requests = [], []
    for e in records:
        lang, name = e.meta["language"], e.meta["character"]
        user, colon = SPEAKER[lang]
        lines = [f"{who}{colon}{text}" for u, c in transcripts[e.id] for who, text in ((user, u), (name, c))]
        for dimension in ev.dimensions[e.task]:
            template = f"judge_{dimension}_{lang}"
            text = prompts.render(
                template,
                name=name,
                description=e.meta["description"],
                transcript="\n".join(lines),
                reference=e.meta["reference"] or NONE[lang],
                score_max=str(ev.score_max),
            )
            version = f"rmtbench-{prompts.templates[template].sha256[:12]}"
            jobs.append((e, dimension))
            requests.append(ChatRequest(({"role": "user", "content": text},), ev.judge_max_tokens, version))
    replies = client.ask_parsed(requests, lambda t: parse_score(t, ev.score_max), REASK, desc="judge (rmtbench)")
    return [
        {
            "id": e.id,
            "language": e.meta["language"],
            "scenario": e.task,
            "dimension": dimension,
            "score": reply.value,
            "status": reply.status,
            "reply": reply.text,
            "attempts": reply.attempts,
        }
        for (e, dimension), reply in zip(jobs, replies)
    ]


def _summary(rows: Sequence[Mapping[str, Any]], bootstrap: Mapping[str, Any]) -> dict[str, Any]:
    summary = summarize([r["score"] for r in rows], **bootstrap)
    summary["parse_failures"] = sum(r["status"] == "parse_failure" for r in rows)
    summary["request_failures"] = sum(r["status"] == "request_failure" for r in rows)
    return summary


def aggregate(judgements: Sequence[Mapping[str, Any]], bootstrap: Mapping[str, Any]) -> dict[str, Any]:
    """Per language: each dimension's summary, each scenario's per dimension, and the mean of dimension means."""
    out: dict[str, Any] = {}
    for lang in LANGUAGES:
        mine = [j for j in judgements if j["language"] == lang]
        if not mine:
            continue
        dimensions = {
            d: _summary([j for j in mine if j["dimension"] == d], bootstrap)
            for d in DIMENSIONS
            if any(j["dimension"] == d for j in mine)
        }
        scenarios = {
            s: {
                d: _summary([j for j in mine if j["scenario"] == s and j["dimension"] == d], bootstrap)
                for d in DIMENSIONS
                if any(j["scenario"] == s and j["dimension"] == d for j in mine)
            }
            for s in SCENARIOS
            if any(j["scenario"] == s for j in mine)
        }
        means = [s["mean"] for s in dimensions.values()]
        overall = None if None in means else sum(means) / len(means)
        out[lang] = {"dimensions": dimensions, "scenarios": scenarios, "overall": overall}
    return out


def report_sections(results: Mapping[str, Any]) -> list[str]:
    lines = [
        f"## RMTBench (judge `{results['judge_model']}`)\n",
        f"Scores 1-{results['score_max']}, mean [95% bootstrap CI] over whole dialogues; overall: the mean of the "
        "dimension means.\n",
        "| language | dimension | n | mean | unparsed | unanswered |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for lang, table in results["rmtbench"].items():
        for dim, s in table["dimensions"].items():
            mean = "-" if s["mean"] is None else f"{s['mean']:.3f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]"
            lines.append(f"| {lang} | {dim} | {s['n']} | {mean} | {s['parse_failures']} | {s['request_failures']} |")
        overall = "-" if table["overall"] is None else f"{table['overall']:.3f}"
        lines.append(f"| {lang} | **overall** | | {overall} | | |")
    if results["empty_replies"]:
        lines.append(f"\n{results['empty_replies']} character turn(s) were empty (judged as they are).")
    if results["truncated"]:
        lines.append(f"\n{results['truncated']} dialogue(s) cut at evaluator.max_turns.")
    return ["\n".join(lines)]


BENCHMARKS.register("rmtbench")(RMTBench())
