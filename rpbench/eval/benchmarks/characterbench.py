"""CharacterBench (Zhou et al., AAAI 2025): one reply per probe query, scored by a judge (CharacterJudge).

``data=characterbench`` reads the 13 test files (``rpbench.data.characterbench``); the model answers each
record's dialogue once (predictions.jsonl, resumable). The reply scored is the ``response`` of a JSON object
when the reply is one (the authors' prompt asks for ``{"response": ...}``), else the whole reply (counted as
``replies.not_json``); an empty reply is not judged (counted, left out of the means).

The judge is any OpenAI-compatible endpoint (``judge=openai`` with ``judge.base_url`` at a vLLM server of
thu-coai's CharacterJudge, as the authors score): one request per reply, the subset's judge prompt
(``characterbench_prompts``) as the only message (no system message: a Qwen chat template adds its default
one, as the authors' script sends it). The score is the number on the reply's first line (a bare number, as
CharacterJudge writes it, or after ``评分：``/``Score:``; full-width digits read); none, or one outside 1 to the
scale's top, is a parse failure, counted and left out (the authors' script scores an unreadable reply 3).

Aggregation as the authors' ``all_eval.py``: a subset's mean scaled to 5 by the top of its scale (the largest
human ``annotation_score`` in its file with the authors' prompts; 5 with rpbench's); the average of the
subsets' scaled means per language is the headline ("CharacterBench average"). Besides: each subset's and
each dimension's mean with a bootstrap CI (scaled), and the sparse and dense dimensions' averages.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.data.characterbench_prompts import (
    DEFAULT_SCALE,
    DIMENSION_OF,
    DIMENSIONS,
    LANGUAGES,
    SPARSE,
    SUBSETS,
    CharacterBenchPrompts,
)
from rpbench.data.records import EvalExample
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, Judged, JudgeTally, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import JudgedSettings
from rpbench.eval.stats import summarize
from rpbench.scoring.chat.client import EndpointSettings

NUMBER = re.compile(r"^\s*(?:评分|分数|得分|score|rating)?\s*[:：]?\s*(\d+(?:\.\d+)?)\s*分?\s*$", re.IGNORECASE)
FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def parse_score(text: str, top: float) -> float | None:
    """The score on the judge reply's first line (module docstring); None when there is none in 1..``top``."""
    line = unicodedata.normalize("NFKC", text).strip().split("\n")[0]
    found = NUMBER.match(line)
    score = float(found.group(1)) if found else None
    return score if score is not None and 1 <= score <= top else None


def scored_reply(text: str) -> tuple[str, bool]:
    """(the reply the judge sees, whether it was the ``response`` of a JSON object)."""
    stripped = FENCE.sub("", text.strip()).strip()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return text.strip(), False
    if isinstance(value, dict) and isinstance(value.get("response"), str):
        return value["response"].strip(), True
    return text.strip(), False


class CharacterBenchSettings(JudgedSettings):
    needs_metrics = False  # judged alone


class CharacterBench(Benchmark):
    headlines = tuple(
        Headline(
            f"CharacterBench average ({lang})", ("characterbench", lang), "average", needs=f"{lang} in data.languages"
        )
        for lang in LANGUAGES
    )
    judged = True
    settings_class = CharacterBenchSettings

    def judge_requests(self, settings: CharacterBenchSettings, examples: Sequence[EvalExample]) -> list[int]:
        return [1] * len(examples)

    def reaskable_requests(self, settings: CharacterBenchSettings, examples: Sequence[EvalExample]) -> list[int]:
        return [0] * len(examples)  # asked once, as the authors do

    def problems(self, settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        out = []
        if judge is None:
            out.append("evaluator=characterbench is scored by a judge (CharacterJudge behind judge=openai, or any)")
        if data.format != "characterbench":
            out.append(f"evaluator=characterbench reads data=characterbench (format characterbench), got {data.format}")
        return out

    def prepare_judge(self, ctx: EvalContext) -> CharacterBenchPrompts:
        prompts = CharacterBenchPrompts.load(ctx.prompts_source)
        if not prompts.own:
            for subset in {e.meta["subset"] for e in ctx.examples}:
                if not any(e.meta["annotation_score"] for e in ctx.examples if e.meta["subset"] == subset):
                    raise ConfigError(
                        f"characterbench subset {subset}: no record has an annotation_score, the top of the authors' "
                        "scale (their prompts, prompts.source, score on it)"
                    )
        return prompts

    def judge(self, ctx: EvalContext, predictions: Mapping[str, str], prepared: CharacterBenchPrompts) -> Judged:
        from rpbench.scoring.chat import ChatRequest

        tops = scale_tops(ctx.examples, prepared)
        jobs, requests, rows = [], [], []
        not_json = 0
        for e in ctx.examples:
            reply, was_json = scored_reply(predictions[e.id])
            not_json += not was_json
            row = {"id": e.id, "language": e.meta["language"], "subset": e.task, "reply": reply}
            rows.append(row)
            if not reply:
                row.update(score=None, status="empty_reply", judge_reply=None)
                continue
            m = e.meta
            template = f"judge_{e.task}_{m['language']}"
            text = prepared.render(
                template,
                character_profile=m["character_profile"],
                dialogue=m["dialogue"],
                user_query=m["user_query"],
                character_response=f"{m['character']}：{reply}",
                reference=m["reference"],
            )
            version = f"characterbench-{prepared.templates[template].sha256[:12]}"
            jobs.append((row, tops[(m["language"], e.task)]))
            requests.append(ChatRequest(({"role": "user", "content": text},), ctx.settings.judge_max_tokens, version))
        with ctx.open_client() as client:
            replies = client.ask_many(requests, desc="judge (characterbench)")
            usage = client.stats.as_dict()
            model = client.config.model
        for (row, top), reply in zip(jobs, replies):
            score = None if reply.error is not None else parse_score(reply.text or "", top)
            status = "request_failure" if reply.error is not None else ("ok" if score is not None else "parse_failure")
            row.update(score=score, status=status, judge_reply=reply.text)
        write_jsonl(ctx.out_dir / "judgements.jsonl", rows)
        table = aggregate(rows, tops, ctx.settings.bootstrap.as_kwargs())
        results = {
            "characterbench": table,
            "replies": {"n": len(rows), "not_json": not_json},
            "scale_tops": {f"{lang}/{subset}": top for (lang, subset), top in tops.items()},
            "judge_model": model,
            "judge_usage": usage,
            "prompts": prepared.record(),
            "metrics": {"overall": {f"{lang}/{s}": t["subsets"][s] for lang, t in table.items() for s in t["subsets"]}},
        }
        return Judged(results, {r["id"]: {"score": r["score"]} for r in rows})

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        if "characterbench" not in results:
            return None
        subsets = [s for t in results["characterbench"].values() for s in t["subsets"].values()]
        parse, request = (sum(s[k] for s in subsets) for k in ("parse_failures", "request_failures"))
        return JudgeTally(sum(s["n"] for s in subsets) + parse + request, parse, request)

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        if "characterbench" not in results:
            return []
        lines = [
            f"## CharacterBench (judge `{results['judge_model']}`)\n",
            "Means scaled to 5 by the top of each subset's scale, [95% bootstrap CI]; average: the mean of the "
            "subsets' (the authors' all_eval.py).\n",
            "| language | subset | n | scaled mean | unparsed | unanswered | empty replies |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for lang, table in results["characterbench"].items():
            for subset, s in table["subsets"].items():
                mean = "-" if s["mean"] is None else f"{s['mean']:.3f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]"
                lines.append(
                    f"| {lang} | {subset} | {s['n']} | {mean} | {s['parse_failures']} | {s['request_failures']} "
                    f"| {s['empty_replies']} |"
                )
            average = "-" if table["average"] is None else f"{table['average']:.3f}"
            lines.append(f"| {lang} | **average** | | {average} | | | |")
        return ["\n".join(lines)]


def scale_tops(examples: Sequence[EvalExample], prompts: CharacterBenchPrompts) -> dict[tuple[str, str], float]:
    """(language, subset) -> the top of its judge's scale: 5 with rpbench's prompts, else the largest human
    annotation score of the subset's file (the authors' normalisation)."""
    tops: dict[tuple[str, str], float] = {}
    for e in examples:
        key = (e.meta["language"], e.task)
        score = DEFAULT_SCALE if prompts.own else (e.meta["annotation_score"] or 0)
        tops[key] = max(tops.get(key, 0), score)
    return tops


def aggregate(
    rows: Sequence[Mapping[str, Any]], tops: Mapping[tuple[str, str], float], bootstrap: Mapping[str, Any]
) -> dict[str, Any]:
    """Per language: each subset's and dimension's scaled summary, sparse/dense and overall averages."""
    out: dict[str, Any] = {}
    for lang in LANGUAGES:
        mine = [r for r in rows if r["language"] == lang]
        if not mine:
            continue
        scaled = {id(r): None if r["score"] is None else r["score"] * 5 / tops[(lang, r["subset"])] for r in mine}
        subsets = {}
        for subset in SUBSETS:
            group = [r for r in mine if r["subset"] == subset]
            if not group:
                continue
            summary = summarize([scaled[id(r)] for r in group], **bootstrap)
            for status, key in (
                ("parse_failure", "parse_failures"),
                ("request_failure", "request_failures"),
                ("empty_reply", "empty_replies"),
            ):
                summary[key] = sum(r["status"] == status for r in group)
            summary["scale_top"] = tops[(lang, subset)]
            subsets[subset] = summary
        dimensions = {}
        for dim in DIMENSIONS:
            group = [r for r in mine if r["subset"] in subsets and DIMENSION_OF[r["subset"]] == dim]
            if group:
                dimensions[dim] = {**summarize([scaled[id(r)] for r in group], **bootstrap), "sparse": dim in SPARSE}
        means = [s["mean"] for s in subsets.values()]
        out[lang] = {
            "subsets": subsets,
            "dimensions": dimensions,
            "sparse": _average([d["mean"] for d in dimensions.values() if d["sparse"]]),
            "dense": _average([d["mean"] for d in dimensions.values() if not d["sparse"]]),
            "average": _average(means),
            "n_subsets": len(subsets),
        }
    return out


def _average(means: Sequence[float | None]) -> float | None:
    return None if not means or None in means else sum(means) / len(means)


BENCHMARKS.register("characterbench")(CharacterBench())
