"""``evaluator=rm_bench``: a reward model or a judge scored against human preference pairs of role-play replies
(``data.format: rm_bench``, rpbench/data/rm_bench.py). The evaluated object is the scorer; no policy model loads.

Scorers (``evaluator.scorer``):

- ``reward_model``: a one-label sequence-classification model in a local folder (``evaluator.reward_model.path``),
  ``rpbench.scoring.reward_model.RewardModelScorer``: each reply scored after its context with the model's chat
  template;
- ``judge_pointwise``: the run's judge rates each reply 1-10 (``rpbench.scoring.judge.preference``);
- ``judge_pairwise``: the judge picks the better of the two replies (A, B or tie), asked in both orders.

A pair's outcome: ``correct`` (the chosen reply scored above the rejected one), ``wrong`` (below), ``tie`` (equal
scores; pairwise: the two orders do not agree on one reply, or a tie verdict) or ``failed`` (a score or verdict
missing: request or parse failure). Pairwise, ``correct`` needs both orders to prefer the chosen reply.

Reported, overall and per group: accuracy = correct / (correct + wrong), ties left out and counted beside it
(``ties``, ``tie_rate`` = ties / scored pairs, ``accuracy_ties_as_half`` = (correct + ties / 2) / scored pairs),
failures counted, a bootstrap CI of the accuracy over the decided pairs (``evaluator.bootstrap``). Groups: the
category (the record's task), seen / unseen / unlabelled characters, the length difference (characters of the
chosen reply minus the rejected one's, stripped) in the bins ``evaluator.length_bins`` cut (half-open
[low, high)), and its sign (``chosen_shorter``, ``equal_length``, ``chosen_longer``);
``length_balanced_accuracy`` is the mean of the chosen-shorter and chosen-longer accuracies (a scorer that only
prefers longer replies scores 0.5 there). Pairwise judges: each order's own accuracy and the position-flip
disagreement (pairs whose two verdicts, both read, name different preferences, a tie verdict being one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.typed import Problem, Settings, as_dict
from rpbench.data.prepare import read_split
from rpbench.data.records import EvalExample, as_messages
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, Headline, JudgeTally, write_jsonl
from rpbench.eval.context import EvalContext
from rpbench.eval.settings import Bootstrap
from rpbench.eval.stats import summarize
from rpbench.scoring.chat.client import EndpointSettings, ParsedReply

log = logging.getLogger(__name__)

SCORERS = ("reward_model", "judge_pointwise", "judge_pairwise")
DTYPES = ("float32", "bfloat16", "float16")
OUTCOMES = ("correct", "wrong", "tie", "failed")
CORRECT = {"correct": 1.0, "wrong": 0.0}  # scores.jsonl's metrics/correct (ties and failures: None)


@dataclass(frozen=True, kw_only=True)
class RewardModelSource(Settings):
    """``evaluator.reward_model``: the local folder of a one-label sequence-classification model."""

    path: str | None
    batch_size: int
    dtype: str

    def problems(self) -> list[Problem]:
        found: list[Problem] = [] if self.batch_size >= 1 else [("batch_size", "an integer >= 1")]
        return found + ([] if self.dtype in DTYPES else [("dtype", f"one of {', '.join(DTYPES)}")])


@dataclass(frozen=True, kw_only=True)
class RMBenchSettings(Settings):
    """conf/evaluator/rm_bench.yaml: which scorer is evaluated and how the accuracy is broken down."""

    name: str
    metrics: tuple[str, ...]
    scorer: str
    reward_model: RewardModelSource
    judge_max_tokens: int
    length_bins: tuple[float, ...]  # edges (characters) of the chosen-minus-rejected length difference
    bootstrap: Bootstrap

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.scorer not in SCORERS:
            found.append(("scorer", f"one of {', '.join(SCORERS)}"))
        path = self.reward_model.path
        if self.scorer == "reward_model" and not (path and Path(path).is_dir()):
            found.append(("reward_model.path", "the local folder of a sequence-classification reward model"))
        if self.judge_max_tokens < 1:
            found.append(("judge_max_tokens", "an integer >= 1 (tokens)"))
        edges = list(self.length_bins)
        if not edges or edges != sorted(set(edges)):
            found.append(("length_bins", "at least one edge, strictly increasing"))
        return found


# -- outcomes ---------------------------------------------------------------------------------------------------


def pointwise_outcome(chosen: float | None, rejected: float | None) -> str:
    if chosen is None or rejected is None:
        return "failed"
    return "correct" if chosen > rejected else "wrong" if chosen < rejected else "tie"


def preferred(choice: str | None, chosen_first: bool) -> str | None:
    """Which reply a pairwise verdict prefers: ``chosen``, ``rejected``, ``tie`` (None: no verdict)."""
    if choice is None or choice == "tie":
        return choice
    return "chosen" if (choice == "A") == chosen_first else "rejected"


def pairwise_outcome(first: str | None, second: str | None) -> str:
    """The pair's outcome from its two orders' preferences (chosen shown first, then second)."""
    if first is None or second is None:
        return "failed"
    if first == second and first != "tie":
        return "correct" if first == "chosen" else "wrong"
    return "tie"


# -- statistics -------------------------------------------------------------------------------------------------


def tally(outcomes: Sequence[str], bootstrap: Bootstrap) -> dict[str, Any]:
    """Counts of each outcome, the accuracy over decided pairs with its bootstrap CI, and the tie conventions."""
    counts = {o: sum(x == o for x in outcomes) for o in OUTCOMES}
    scored, decided = len(outcomes) - counts["failed"], counts["correct"] + counts["wrong"]
    summary = summarize([CORRECT[o] for o in outcomes if o in CORRECT], **bootstrap.as_kwargs())
    return {
        "n": len(outcomes),
        **{("ties" if o == "tie" else o): counts[o] for o in OUTCOMES},
        "decided": decided,
        "accuracy": summary["mean"],
        "ci_low": summary["ci_low"],
        "ci_high": summary["ci_high"],
        "tie_rate": counts["tie"] / scored if scored else None,
        "accuracy_ties_as_half": (counts["correct"] + counts["tie"] / 2) / scored if scored else None,
    }


def grouped(labels: Sequence[str], outcomes: Sequence[str], bootstrap: Bootstrap) -> dict[str, dict[str, Any]]:
    """``tally`` per label, labels in order of first appearance."""
    return {
        label: tally([o for lab, o in zip(labels, outcomes, strict=True) if lab == label], bootstrap)
        for label in dict.fromkeys(labels)
    }


def length_bin(diff: float, edges: Sequence[float]) -> str:
    """The bin of ``diff`` among half-open bins cut at ``edges``: ``< e0``, ``[e0, e1)``, ..., ``>= ek``."""
    if diff < edges[0]:
        return f"< {edges[0]:g}"
    for low, high in zip(edges, edges[1:]):
        if low <= diff < high:
            return f"[{low:g}, {high:g})"
    return f">= {edges[-1]:g}"


def length_direction(diff: float) -> str:
    return "chosen_shorter" if diff < 0 else "chosen_longer" if diff > 0 else "equal_length"


def seen_label(seen: bool | None) -> str:
    return "unlabelled" if seen is None else "seen" if seen else "unseen"


def length_diff(e: EvalExample) -> int:
    return len(e.reference.strip()) - len(e.meta["rejected"].strip())


def breakdowns(examples: Sequence[EvalExample], outcomes: Sequence[str], settings: RMBenchSettings) -> dict[str, Any]:
    """Overall, per category, seen/unseen, length bin and length direction; the length-balanced accuracy."""
    diffs = [length_diff(e) for e in examples]
    bins = [length_bin(d, settings.length_bins) for d in diffs]
    order = [length_bin(e, settings.length_bins) for e in [-float("inf"), *settings.length_bins]]
    boot = settings.bootstrap
    by_bin = grouped(bins, outcomes, boot)
    direction = grouped([length_direction(d) for d in diffs], outcomes, boot)
    sides = [direction.get(side, {}).get("accuracy") for side in ("chosen_shorter", "chosen_longer")]
    return {
        "overall": tally(outcomes, boot),
        "by_category": grouped([e.task for e in examples], outcomes, boot),
        "by_seen": grouped([seen_label(e.meta["seen"]) for e in examples], outcomes, boot),
        "by_length_bin": {b: by_bin[b] for b in order if b in by_bin},
        "by_length_direction": direction,
        "length_balanced_accuracy": None if None in sides else sum(sides) / 2,
    }


# -- scoring ----------------------------------------------------------------------------------------------------


def reward_model_scores(settings: RMBenchSettings, conversations: list, replies: list[str]) -> list[float]:
    """The reward model's score of each reply after its conversation (on the GPU when there is one)."""
    import torch

    from rpbench.scoring.reward_model import RewardModelScorer

    rm = settings.reward_model
    scorer = RewardModelScorer(rm.path, rm.batch_size, rm.dtype)
    if torch.cuda.is_available():
        scorer.model.to("cuda")
    return scorer.score(conversations, replies)


def judgement_rows(examples: Sequence[EvalExample], replies: Sequence[ParsedReply], kinds: Sequence[str]) -> list:
    return [
        {"id": e.id, "asked": kind, "value": r.value, "status": r.status, "reply": r.text, "attempts": r.attempts}
        for e, r, kind in zip([*examples, *examples], replies, kinds, strict=True)
    ]


def judge_counts(replies: Sequence[ParsedReply]) -> dict[str, int]:
    statuses = [r.status for r in replies]
    return {
        "n": len(statuses),
        "parse_failures": statuses.count("parse_failure"),
        "request_failures": statuses.count("request_failure"),
    }


def check_judge_budget(ctx: EvalContext, examples: Sequence[EvalExample]) -> None:
    """The judge's estimated cost (two requests a pair) against ``judge.budget``, before anything is asked."""
    from rpbench.scoring.judge.budget import check_budget, estimate

    chars = [sum(len(t.content) for t in e.prompt) + len(e.reference) + len(e.meta["rejected"]) for e in examples]
    found = estimate([(2, c) for c in chars], ctx.settings.judge_max_tokens, ctx.judge.price_input_per_1m,
                     ctx.judge.price_output_per_1m)  # fmt: skip
    check_budget(found, ctx.judge.budget)


def scored_pairs(ctx: EvalContext, examples: Sequence[EvalExample]) -> tuple[list[str], list[dict], dict[str, Any]]:
    """Each pair's outcome, its scores.jsonl detail, and the scorer's own results (judge tally, flips)."""
    ev: RMBenchSettings = ctx.settings
    conversations = [as_messages(e.prompt) for e in examples]
    chosen, rejected = [e.reference for e in examples], [e.meta["rejected"] for e in examples]
    n = len(examples)
    if ev.scorer == "reward_model":
        scores = reward_model_scores(ev, conversations * 2, chosen + rejected)
        details = [{"chosen_score": scores[i], "rejected_score": scores[n + i]} for i in range(n)]
        return [pointwise_outcome(scores[i], scores[n + i]) for i in range(n)], details, {}
    from rpbench.scoring.judge.preference import JudgeRater, ask_pairwise

    check_judge_budget(ctx, examples)
    with ctx.open_client() as client:
        if ev.scorer == "judge_pointwise":
            rater = JudgeRater(client, ev.judge_max_tokens)
            scores = rater.score(conversations * 2, chosen + rejected)
            replies, kinds = rater.replies, ["chosen"] * n + ["rejected"] * n
            details = [{"chosen_score": scores[i], "rejected_score": scores[n + i]} for i in range(n)]
            outcomes = [pointwise_outcome(scores[i], scores[n + i]) for i in range(n)]
            own: dict[str, Any] = {}
        else:
            orders = list(zip(chosen, rejected)) + list(zip(rejected, chosen))
            replies = ask_pairwise(client, conversations * 2, orders, ev.judge_max_tokens)
            kinds = ["chosen_first"] * n + ["chosen_second"] * n
            first = [preferred(r.value, True) for r in replies[:n]]
            second = [preferred(r.value, False) for r in replies[n:]]
            details = [{"chosen_first": a, "chosen_second": b} for a, b in zip(first, second)]
            outcomes = [pairwise_outcome(a, b) for a, b in zip(first, second)]
            own = {"position": position_flips(first, second, ev.bootstrap)}
    write_jsonl(ctx.out_dir / "judgements.jsonl", judgement_rows(examples, replies, kinds))
    return outcomes, details, {**own, "judge": judge_counts(replies)}


def position_flips(first: Sequence[str | None], second: Sequence[str | None], boot: Bootstrap) -> dict[str, Any]:
    """Each order's own accuracy (its verdict alone, tie verdicts as ties) and how often the two orders disagree."""
    both = [(a, b) for a, b in zip(first, second) if a is not None and b is not None]
    alone = {"chosen": "correct", "rejected": "wrong", "tie": "tie", None: "failed"}
    return {
        "chosen_first": tally([alone[a] for a in first], boot),
        "chosen_second": tally([alone[b] for b in second], boot),
        "n_both_read": len(both),
        "flips": sum(a != b for a, b in both),
        "flip_rate": sum(a != b for a, b in both) / len(both) if both else None,
    }


# -- report -----------------------------------------------------------------------------------------------------


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def group_table(title: str, groups: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        "",
        f"| {title} | accuracy [CI] | correct / decided | ties | failed | tie rate | ties as half |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, t in groups.items():
        ci = f" [{_f(t['ci_low'])}, {_f(t['ci_high'])}]" if t["ci_low"] is not None else ""
        lines.append(
            f"| {label} | {_f(t['accuracy'])}{ci} | {t['correct']} / {t['decided']} | {t['ties']} | {t['failed']} | "
            f"{_f(t['tie_rate'])} | {_f(t['accuracy_ties_as_half'])} |"
        )
    return lines


def report_section(found: Mapping[str, Any]) -> str:
    read = found["read"]
    lines = [
        f"## Preference accuracy of {found['scorer_name']} ({found['scorer']})",
        "",
        f"{read['pairs']} pairs read, {read['skipped']} skipped as malformed (data.on_error=skip).",
        "",
        "accuracy = correct / (correct + wrong): ties (equal scores; pairwise: the two orders disagree) are counted "
        "apart, failures (no score or verdict) too. Length: characters of the chosen reply minus the rejected one's.",
    ]
    lines += group_table("pairs", {"all": found["overall"]})
    for key, title in (("by_category", "category"), ("by_seen", "character"), ("by_length_bin", "length difference"),
                       ("by_length_direction", "length direction")):  # fmt: skip
        lines += group_table(title, found[key])
    balanced = _f(found["length_balanced_accuracy"])
    lines += ["", f"Length-balanced accuracy (mean of chosen shorter and chosen longer): {balanced}"]
    if "position" in found:
        p = found["position"]
        lines += [
            f"Position flips: {p['flips']} of {p['n_both_read']} pairs with both verdicts read ({_f(p['flip_rate'])}); "
            f"accuracy with the chosen reply first {_f(p['chosen_first']['accuracy'])}, second "
            f"{_f(p['chosen_second']['accuracy'])}."
        ]
    return "\n".join(lines)


def scorer_name(ev: RMBenchSettings, judge: EndpointSettings | None) -> str:
    return Path(ev.reward_model.path).name if ev.scorer == "reward_model" else str(judge.model if judge else None)


class RMBench(Benchmark):
    judged = True
    reads_records = False  # reads the pairs itself (they hold no reference to generate against)
    needs_model = False  # the evaluated object is the reward model or the judge, not the run's model
    settings_class = RMBenchSettings
    headlines = (Headline("preference accuracy", ("rm_bench", "overall"), value="accuracy", scores="metrics/correct"),)

    def needs_judge(self, settings: RMBenchSettings) -> bool:
        return settings.scorer != "reward_model"

    def problems(self, settings: RMBenchSettings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        found = []
        if data.format != "rm_bench":
            found.append(f"evaluator=rm_bench scores preference pairs: data=rm_bench (data.format {data.format})")
        if settings.scorer == "reward_model" and judge is not None:
            found.append(
                f"evaluator.scorer=reward_model asks no judge: judge=none, or a judge_* scorer to score {judge.model}"
            )
        if settings.scorer != "reward_model" and judge is None:
            found.append(
                f"evaluator.scorer={settings.scorer} scores with the run's judge: choose one (judge=openai|vllm|local)"
            )
        return found

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        counts = results["rm_bench"].get("judge")
        return None if counts is None else JudgeTally(counts["n"], counts["parse_failures"], counts["request_failures"])

    def summary_lines(self, results: Mapping[str, Any]) -> list[str]:
        found = results["rm_bench"]
        overall = found["overall"]
        lines = [
            f"pairs {overall['n']}: {overall['correct']} correct, {overall['wrong']} wrong, {overall['ties']} ties, "
            f"{overall['failed']} failed; ties as half {_f(overall['accuracy_ties_as_half'])}; length-balanced "
            f"accuracy {_f(found['length_balanced_accuracy'])}"
        ]
        if "position" in found:
            lines.append(f"position flips {found['position']['flips']} of {found['position']['n_both_read']}")
        return lines

    def from_files(self, ctx: EvalContext) -> dict[str, Any]:
        ev: RMBenchSettings = ctx.settings
        read = read_split(ctx.data, "test")
        examples = list(read.examples)
        outcomes, details, own = scored_pairs(ctx, examples)
        rows = [
            {"id": e.id, "task": e.task, "metrics": {"correct": CORRECT.get(o)}, "outcome": o,
             "seen": e.meta["seen"], "length_diff": length_diff(e), **d}
            for e, o, d in zip(examples, outcomes, details, strict=True)
        ]  # fmt: skip
        write_jsonl(ctx.out_dir / "scores.jsonl", rows)
        found = {
            "scorer": ev.scorer,
            "scorer_name": scorer_name(ev, ctx.judge),
            **breakdowns(examples, outcomes, ev),
            **own,
            "read": {"pairs": len(examples), "skipped": len(read.skipped)},
            "length_bins": list(ev.length_bins),
            "bootstrap": as_dict(ev.bootstrap),
        }
        return {
            "n_records": len(examples),
            "rm_bench": found,
            "report_sections": [report_section(found)],
        }


BENCHMARKS.register("rm_bench")(RMBench())
