"""Character-LLM interviews (RoleMRC Tables 5 and 10; Shao et al. 2023's protocol), judged on five aspects.

``data=characterllm`` reads the interview questions (``rpbench.data.characterllm``); ``evaluator.settings``
runs either or both settings:

- ``single``: each question asked alone; the model's reply (predictions.jsonl) is the interview;
- ``turns``: an interviewer (the judge's endpoint, ``evaluator.interviewer`` sampling) asks about each
  topic for ``evaluator.max_turns`` turns, the model answering each (predictions_turns_<t>.jsonl; both
  resumable, the interviewer's questions from the judge cache when it is on); transcripts in interviews.jsonl.

The judge scores every interview on personality, hallucination, values, memory and stability, 1 to 7
(``characterllm_prompts``; a system message, then the scoring prompt, as the authors' scoring scripts send
them; the interviewer's requests too carry a system message). The score is the last digit after whitespace
in its reply, as the authors' scripts read it; one that is no 1-7 is a parse failure, counted, asked once as
the authors do (``evaluator.judge_reask=true`` re-asks up to ``judge.parse_tries``). As the authors'
scripts, a reply is scored as its first paragraph with ``*actions*`` removed, and a Turns reply enters the
conversation as its first paragraph. Per setting: each aspect's mean with a bootstrap CI, and their
average (Table 5's number).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rpbench.core.distributed import rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.core.typed import Settings
from rpbench.data.characterllm import SETTINGS
from rpbench.data.characterllm_prompts import ASPECTS, INTERVIEWER, SPEAKER_CUE, CharacterLLMPrompts
from rpbench.data.records import EvalExample, Turn
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, JudgeTally, read_jsonl, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.report import scored_table
from rpbench.eval.settings import JudgedSettings
from rpbench.eval.stats import summarize
from rpbench.scoring.chat.client import EndpointSettings, ParsedReply

SCORE = re.compile(r"\s(\d)")
REASK = "Give your score now: one whole number from 1 to 7, alone on the last line."
ACTION = re.compile(r"\*.*?\*", re.DOTALL)


def first_paragraph(text: str) -> str:
    return text.strip().split("\n\n")[0].strip()


def scored_reply(text: str) -> str:
    """The part of a reply the judge sees: its first paragraph without ``*actions*``."""
    return ACTION.sub("", first_paragraph(text)).strip()


def parse_score(text: str) -> int | None:
    """The last digit after whitespace in the judge's reply, if it is 1-7 (else None: re-asked)."""
    found = SCORE.findall(" " + text)
    score = int(found[-1]) if found else None
    return score if score is not None and 1 <= score <= 7 else None


def interviewer_question(text: str) -> str:
    """The interviewer's next utterance: its first paragraph, without a leading speaker cue."""
    line = first_paragraph(text)
    cue = SPEAKER_CUE.format(speaker=INTERVIEWER)
    return line[len(cue) :].strip() if line.startswith(cue) else line


@dataclass(frozen=True, kw_only=True)
class Interviewer(Settings):
    temperature: float
    top_p: float | None
    max_tokens: int

    def problems(self):
        found = [] if self.temperature >= 0 else [("temperature", "a number >= 0")]
        if self.top_p is not None and not 0 < self.top_p <= 1:
            found.append(("top_p", "null or a number in (0, 1]"))
        return found + ([] if self.max_tokens >= 1 else [("max_tokens", "an integer >= 1")])


@dataclass(frozen=True, kw_only=True)
class CharacterLLMSettings(JudgedSettings):
    settings: tuple[str, ...]
    max_turns: int
    interviewer: Interviewer
    judge_reask: bool  # re-ask an unreadable score (the authors ask once)

    needs_metrics = False  # judged alone

    def problems(self):
        found = super().problems()
        if not self.settings or any(s not in SETTINGS for s in self.settings):
            found.append(("settings", f"a non-empty list from {', '.join(SETTINGS)}"))
        if self.max_turns < 1:
            found.append(("max_turns", "an integer >= 1"))
        return found


class CharacterLLM(Benchmark):
    headlines = (
        Headline("single-turn average", ("characterllm", "single"), "average", needs="single in evaluator.settings"),
    )
    judged = True
    settings_class = CharacterLLMSettings

    def judge_requests(self, settings: CharacterLLMSettings, examples: Sequence[EvalExample]) -> list[int]:
        """An interview of a chosen setting: one score per aspect, and in the Turns setting the interviewer's
        ``max_turns`` questions (asked on the judge's endpoint); a record of a setting not chosen: none."""
        chosen = settings.settings
        return [
            0 if e.task not in chosen else len(ASPECTS) + (settings.max_turns if e.task == "turns" else 0)
            for e in examples
        ]

    def reaskable_requests(self, settings: CharacterLLMSettings, examples: Sequence[EvalExample]) -> list[int]:
        """The aspect scores, with ``judge_reask`` (the interviewer's questions are never re-asked)."""
        return [len(ASPECTS) if settings.judge_reask and e.task in settings.settings else 0 for e in examples]

    def problems(self, settings: Settings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        out = []
        if judge is None:
            out.append("evaluator=characterllm is scored by a judge: choose judge=openai|local|vllm|...")
        if data.format != "characterllm":
            out.append(f"evaluator=characterllm reads data=characterllm (format characterllm), got {data.format}")
        return out

    def evaluate_model(self, ctx: EvalContext) -> dict[str, Any]:
        from rpbench.eval.evaluate import generate  # the generic evaluation imports the benchmarks

        if rank_and_world()[1] > 1:
            raise ConfigError("evaluator=characterllm runs in one process: evaluate with trainer.devices=1")
        ev, out_dir, logger = ctx.settings, ctx.out_dir, ctx.logger
        settings = [s for s in SETTINGS if s in ev.settings]
        chosen = {s: [e for e in ctx.examples if e.task == s] for s in settings}
        for setting, records in chosen.items():
            if not records:
                raise ConfigError(f"evaluator.settings has {setting!r}, and data.files.test has no {setting} interview")
        prompts = CharacterLLMPrompts.load(ctx.prompts_source)
        results: dict[str, Any] = {"n_records": sum(map(len, chosen.values())), "generation": {}}
        interviews: list[dict[str, Any]] = []
        with ctx.open_client() as client:
            if "single" in chosen:
                path = out_dir / "predictions.jsonl"
                results["generation"]["single"] = generate(
                    ctx, chosen["single"], path, "characterllm replies, single-turn"
                )
                replies = {row["id"]: row["prediction"] for row in read_jsonl(path)}
                for e in chosen["single"]:
                    turns = [(INTERVIEWER, e.prompt[-1].content), (e.meta["character"], scored_reply(replies[e.id]))]
                    interviews.append(_interview(e, turns, finished=True))
            if "turns" in chosen:
                interviews += self.interview(ctx, chosen["turns"], client, prompts, results)
            write_jsonl(out_dir / "interviews.jsonl", interviews)
            verdicts, judgements = score(client, prompts, interviews, ev.judge_max_tokens, ev.judge_reask)
            results["judge_usage"] = client.stats.as_dict()
        write_jsonl(out_dir / "judgements.jsonl", judgements)
        scores = [
            {"id": i["id"], "task": i["setting"], "metrics": {}, "verdicts": verdicts[i["id"]]} for i in interviews
        ]
        write_jsonl(out_dir / "scores.jsonl", scores)
        results["characterllm"] = summaries(interviews, verdicts, judgements, ev.bootstrap.as_kwargs())
        results["judge_model"] = client.config.model
        results["prompts"] = prompts.record()
        results["reply_scored_as"] = "first paragraph, *actions* removed (the authors' scoring scripts)"
        results["metrics"] = {
            "overall": {
                f"{s}/{a}": table["aspects"][a] for s, table in results["characterllm"].items() for a in ASPECTS
            }
        }
        results["report_sections"] = report_sections(results)
        if logger is not None:
            if hasattr(logger, "log_table"):
                rows = [
                    [
                        i["id"],
                        i["setting"],
                        "\n".join(f"{t['speaker']}: {t['text']}" for t in i["turns"]),
                        str(verdicts[i["id"]]),
                    ]
                    for i in interviews
                ]
                logger.log_table(key="eval/interviews", columns=["id", "setting", "interview", "scores"], data=rows)
            logger.log_metrics(
                {
                    f"eval/characterllm/{s}/{k}": v["mean"]
                    for s, table in results["characterllm"].items()
                    for k, v in [*table["aspects"].items(), ("average", {"mean": table["average"]})]
                    if v["mean"] is not None
                }
            )
        return results

    def interview(
        self,
        ctx: EvalContext,
        records: Sequence[EvalExample],
        client: Any,
        prompts: CharacterLLMPrompts,
        results: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """The Turns setting: ``max_turns`` rounds of interviewer question, then the model's answer."""
        from rpbench.eval.evaluate import generate
        from rpbench.scoring.chat import ChatRequest, new_client
        from rpbench.scoring.chat.health import role_health

        ev = ctx.settings
        sampling = replace(client.config, temperature=ev.interviewer.temperature, top_p=ev.interviewer.top_p)
        asker = new_client(sampling, client.endpoint, role="simulator")
        template = prompts.templates["interviewer"]
        version = f"characterllm-interviewer-{template.sha256[:12]}"
        loc_time, transcripts = prompts.render("loc_time"), {e.id: [] for e in records}
        system = {"role": "system", "content": prompts.render("interviewer_system")}

        def asking(e: EvalExample) -> dict[str, str]:
            return {"role": "user", "content": interviewer_prompt(e, transcripts[e.id], prompts, loc_time)}

        stopped: dict[str, str] = {}
        asked_in_all = 0
        try:
            for turn in range(1, ev.max_turns + 1):
                active = [e for e in records if e.id not in stopped]
                asked_in_all += len(active)
                requests = [ChatRequest((system, asking(e)), ev.interviewer.max_tokens, version) for e in active]
                asked = []
                for e, reply in zip(active, asker.ask_many(requests, desc=f"interviewer, turn {turn}")):
                    question = interviewer_question(reply.text or "")
                    if reply.error is not None or not question:
                        stopped[e.id] = (
                            f"turn {turn}: the interviewer gave no question ({reply.error or 'empty reply'})"
                        )
                        continue
                    transcripts[e.id].append((INTERVIEWER, question))
                    asked.append(e)
                turn_records = [turn_record(e, transcripts[e.id], turn) for e in asked]
                path = ctx.out_dir / f"predictions_turns_{turn}.jsonl"
                results["generation"][f"turns_{turn}"] = generate(
                    ctx, turn_records, path, f"characterllm replies, turn {turn}"
                )
                answers = {row["id"]: row["prediction"] for row in read_jsonl(path)}
                for e, record in zip(asked, turn_records):
                    transcripts[e.id].append((e.meta["character"], first_paragraph(answers[record.id])))
            results["interviewer_usage"] = asker.stats.as_dict()
        finally:
            asker.close()
        results["interviews_stopped"] = stopped
        limit = ctx.judge.warn_request_failure_rate  # asked with the judge's client settings
        health = role_health("simulator", asked_in_all, len(stopped), limit, "judge.warn_request_failure_rate")
        results["endpoints"] = {"simulator": health}
        return [_interview(e, transcripts[e.id], finished=e.id not in stopped) for e in records]

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        """Every (interview, aspect) judgement of every setting."""
        aspects = [s for t in results["characterllm"].values() for s in t["aspects"].values()]
        parse, request = (sum(s[k] for s in aspects) for k in ("parse_failures", "request_failures"))
        return JudgeTally(sum(s["n"] for s in aspects) + parse + request, parse, request)


def interviewer_prompt(
    e: EvalExample, transcript: Sequence[tuple[str, str]], prompts: CharacterLLMPrompts, loc_time: str
) -> str:
    head = prompts.render(
        "interviewer",
        character=e.meta["character_name"],
        topic=e.prompt[-1].content,
        profile=e.meta["profile"],
        loc_time=loc_time,
        status=prompts.render("status", name=e.meta["character"]),
    )
    lines = [f"{SPEAKER_CUE.format(speaker=speaker)} {text}" for speaker, text in transcript]
    return "\n\n".join([head, *lines, SPEAKER_CUE.format(speaker=INTERVIEWER)])


def turn_record(e: EvalExample, transcript: Sequence[tuple[str, str]], turn: int) -> EvalExample:
    """The model's prompt at ``turn``: the system prompt, then the interview so far (interviewer = user)."""
    turns = [e.prompt[0], *(Turn("user" if who == INTERVIEWER else "assistant", text) for who, text in transcript)]
    return replace(e, id=f"{e.id}#turn{turn}", prompt=tuple(turns))


def _interview(e: EvalExample, turns: Sequence[tuple[str, str]], finished: bool) -> dict[str, Any]:
    return {
        "id": e.id,
        "setting": e.task,
        "character": e.meta["character"],
        "profile": e.meta["profile"],
        "topic": e.prompt[-1].content if e.task == "turns" else e.meta.get("topic"),
        "turns": [{"speaker": who, "text": text} for who, text in turns],
        "finished": finished,
    }


def score(
    client: Any, prompts: CharacterLLMPrompts, interviews: Sequence[Mapping[str, Any]], max_tokens: int, reask: bool
) -> tuple[dict[str, dict[str, int | None]], list[dict[str, Any]]]:
    """Each interview's score per aspect (None: parse or request failure) and the judge's replies; an
    unreadable score is re-asked only with ``reask``."""
    from rpbench.scoring.chat import ChatRequest

    loc_time = prompts.render("loc_time")
    system = {"role": "system", "content": prompts.render("judge_system")}
    jobs, requests = [], []
    for interview in interviews:
        name = interview["character"]
        conversation = "\n".join(f"{t['speaker']}: {t['text']}" for t in interview["turns"])
        for aspect in ASPECTS:
            template = prompts.templates[f"score_{aspect}"]
            text = template.render(
                agent_name=name,
                agent_context=interview["profile"],
                loc_time=loc_time,
                status=prompts.render("status", name=name),
                interactions=conversation,
            )
            jobs.append((interview["id"], aspect))
            version = f"characterllm-{aspect}-{template.sha256[:12]}"
            requests.append(ChatRequest((system, {"role": "user", "content": text}), max_tokens, version))
    if reask:
        replies = client.ask_parsed(requests, parse_score, REASK, desc="judge (characterllm)")
    else:
        replies = ask_once(client, requests)
    verdicts: dict[str, dict[str, int | None]] = {i["id"]: {} for i in interviews}
    judgements = []
    for (rid, aspect), reply in zip(jobs, replies):
        verdicts[rid][aspect] = reply.value
        judgements.append(
            {
                "id": rid,
                "aspect": aspect,
                "score": reply.value,
                "status": reply.status,
                "reply": reply.text,
                "attempts": reply.attempts,
            }
        )
    return verdicts, judgements


def ask_once(client: Any, requests: Sequence[Any]) -> list[ParsedReply]:
    """Each request asked once and its reply parsed (``parse_score``), as the authors' scoring scripts do."""
    results = client.ask_many(requests, desc="judge (characterllm)")
    return [
        ParsedReply(None if r.error is not None else parse_score(r.text or ""), r.text, 1, r.error) for r in results
    ]


def summaries(
    interviews: Sequence[Mapping[str, Any]],
    verdicts: Mapping[str, Mapping[str, int | None]],
    judgements: Sequence[Mapping[str, Any]],
    bootstrap: Mapping[str, Any],
) -> dict[str, Any]:
    """Per setting: each aspect's summary and failure counts, the average of the aspect means (Table 5)."""
    out: dict[str, Any] = {}
    for setting in SETTINGS:
        ids = [i["id"] for i in interviews if i["setting"] == setting]
        if not ids:
            continue
        statuses = [j for j in judgements if j["id"] in set(ids)]
        aspects = {}
        for aspect in ASPECTS:
            summary = summarize([verdicts[i][aspect] for i in ids], **bootstrap)
            mine = [j["status"] for j in statuses if j["aspect"] == aspect]
            summary["parse_failures"] = mine.count("parse_failure")
            summary["request_failures"] = mine.count("request_failure")
            aspects[aspect] = summary
        means = [a["mean"] for a in aspects.values()]
        out[setting] = {
            "n_interviews": len(ids),
            "unfinished_interviews": sum(not i["finished"] for i in interviews if i["setting"] == setting),
            "aspects": aspects,
            "average": None if None in means else sum(means) / len(means),
        }
    return out


def report_sections(results: Mapping[str, Any]) -> list[str]:
    rows = {setting: (t["n_interviews"], t["aspects"], t["average"]) for setting, t in results["characterllm"].items()}
    table, left_out = scored_table(("setting", "interviews"), rows, {a: a.capitalize() for a in ASPECTS}, digits=4)
    stopped = results.get("interviews_stopped") or {}
    text = (
        f"## Character-LLM interviews (judge `{results['judge_model']}`)\n\n"
        "Scores 1-7, mean [95% bootstrap CI]; average: the mean of the five (RoleMRC Table 5). Replies scored as "
        f"{results['reply_scored_as']}.\n\n" + table
    )
    if left_out:
        text += "\n\n" + left_out
    if stopped:
        text += f"\n\nInterviews cut short ({len(stopped)}): " + "; ".join(f"{k}: {v}" for k, v in stopped.items())
    return [text]


BENCHMARKS.register("characterllm")(CharacterLLM())
