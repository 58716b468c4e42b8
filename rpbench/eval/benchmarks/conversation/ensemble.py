"""The session judge ensemble (``evaluator.judges``) and the judges' position bias in pairwise verdicts.

Each entry of ``evaluator.judges`` is a judge's settings merged over the ``judge`` group's (RPGBench's idiom,
``judge_configs``); empty or null: the ``judge`` group alone (one judge, no ensemble). Every judge scores
every whole session. Per judge: each dimension's and ``overall``'s mean with a bootstrap CI over the sessions it
gave a verdict on; an unparsed or unanswered verdict is counted for that judge and left out of its means (never
a 0). Ensemble: per session and dimension, the mean over the judges that gave a verdict (how many did is
counted, ``judges_per_session``), then summarised over sessions as one judge's scores are. Agreement:
Krippendorff's alpha (interval and ordinal) with units = (session, dimension), coders = judges, missing verdicts
left missing; pooled and per dimension.

Pairwise (``evaluator.pairwise_with``): the flip rate is the share of compared sessions, with both orders
parsed, whose outcome changes when the two sessions swap places (once the swap is undone), per dimension and
pooled over dimensions (``overall``); per judge with an ensemble, whose win rate per session and dimension is
the mean over the judges with a verdict.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rpbench.eval.benchmarks.conversation.pairwise import OUTCOME
from rpbench.eval.benchmarks.rpgbench.evaluator import JudgeValue
from rpbench.eval.context import EvalContext
from rpbench.eval.stats import summarize
from rpbench.scoring.chat.client import ChatClient, EndpointSettings
from rpbench.scoring.judge.parties import Party, judge_party
from rpbench.scoring.krippendorff import alpha

log = logging.getLogger(__name__)
# evaluator.judges: each entry's keys over the judge group's; a mapping (``server``) merged over the group's mapping
Judges = tuple[Mapping[str, JudgeValue | Mapping[str, JudgeValue]], ...] | None
LEVELS = ("interval", "ordinal")
JUDGED = ("ok", "parse_failure", "request_failure")  # a judgement's statuses (a session cut short: how it ended)


def merged(group: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry of ``evaluator.judges`` over the judge group's settings; a mapping in both (``server``: another
    served model, ``{server: {model: tiny-llama}}``) merged key by key."""
    out = dict(group)
    for key, value in entry.items():
        both = isinstance(value, Mapping) and isinstance(group.get(key), Mapping)
        out[key] = {**group[key], **value} if both else value
    return out


def ensemble_configs(judge: EndpointSettings, judges: Judges) -> list[EndpointSettings]:
    """The judges scoring the sessions: ``judge`` with each entry of ``evaluator.judges`` over it (none: ``judge``)."""
    if not judges:
        return [judge]
    return [EndpointSettings.parse(merged(judge.plain(), e), f"evaluator.judges[{i}]") for i, e in enumerate(judges)]


def judge_parties(judge: EndpointSettings, judges: Judges) -> list[Party]:
    """Each judge of the ensemble as a party of the run (the ``judge`` group alone when there is no ensemble)."""
    if not judges:
        return [judge_party(judge, "the judge (judge)")]
    configs = ensemble_configs(judge, judges)
    return [judge_party(c, f"judge {i} of the ensemble (evaluator.judges[{i}])") for i, c in enumerate(configs)]


def ask_each(ctx: EvalContext, ask: Callable[[ChatClient], Any]) -> dict[str, tuple[Any, dict[str, Any]]]:
    """``ask`` of every judge of ``evaluator.judges`` (each client opened in turn): name -> (its answer, its
    client's usage). A judge's name: ``<index>:<model>``."""
    out = {}
    for k, config in enumerate(ensemble_configs(ctx.judge, ctx.settings.judges)):
        with ctx.open_client(config) as client:
            answer = ask(client)
            out[f"{k}:{client.config.model}"] = (answer, client.stats.as_dict())
    return out


def score_summaries(judgements: Sequence[Mapping[str, Any]], dimensions: Sequence[str], bootstrap: Mapping) -> dict:
    """Each dimension's and ``overall``'s (a session's mean over dimensions) summary over the sessions."""
    out = {d: summarize([j["scores"][d] for j in judgements], **bootstrap) for d in dimensions}
    overall = [
        None if None in j["scores"].values() else sum(j["scores"].values()) / len(dimensions) for j in judgements
    ]
    return out | {"overall": summarize(overall, **bootstrap)}


def combined(per_judge: Mapping[str, Sequence[Mapping[str, Any]]], dimensions: Sequence[str]) -> list[dict[str, Any]]:
    """One judgement per session from the judges' (the order of the sessions): per dimension the mean over the
    judges with a verdict, or None; ``judges`` how many gave one; ``by_judge`` each judge's scores; the breaks of
    every judge, each named; status ``ok`` when one judge gave a verdict, else the first judge's (a failure, or
    how a session cut short ended)."""
    out = []
    for rows in zip(*per_judge.values()):
        given = [r for r in rows if r["status"] == "ok"]
        scores = {d: sum(r["scores"][d] for r in given) / len(given) if given else None for d in dimensions}
        breaks = [
            {"turn": b["turn"], "reason": f"[{name}] {b['reason']}"}
            for name, r in zip(per_judge, rows)
            for b in r["breaks"]
        ]
        out.append(
            {
                "id": rows[0]["id"],
                "status": "ok" if given else rows[0]["status"],
                "scores": scores,
                "judges": len(given),
                "by_judge": {name: r["scores"] for name, r in zip(per_judge, rows)},
                "breaks": sorted(breaks, key=lambda b: b["turn"]),
                "breaks_out_of_range": sum(r["breaks_out_of_range"] for r in rows),
            }
        )
    return out


def agreement(per_judge: Mapping[str, Sequence[Mapping[str, Any]]], dimensions: Sequence[str]) -> dict[str, Any]:
    """Krippendorff's alpha among the judges over (session, dimension) units (the judged sessions: cut short ones
    are no units), pooled and per dimension; a missing verdict is a missing value."""
    rows = {name: [r for r in judged if r["status"] in JUDGED] for name, judged in per_judge.items()}
    by_dimension = {d: [[r["scores"][d] for r in judged] for judged in rows.values()] for d in dimensions}
    pooled = [[v for d in dimensions for v in by_dimension[d][k]] for k in range(len(rows))]
    units = sum(sum(v is not None for v in unit) >= 2 for unit in zip(*pooled))
    return {
        **{level: alpha(pooled, level) for level in LEVELS},
        "pairable_units": units,
        "by_dimension": {d: {level: alpha(m, level) for level in LEVELS} for d, m in by_dimension.items()},
    }


def judge_ensemble(
    per_judge: Mapping[str, tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]],
    dimensions: Sequence[str],
    bootstrap: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The sessions' combined judgements (``combined``) and the ensemble's results: per judge its scores, counts
    and usage; the agreement among the judges; how many judges scored each judged session."""
    judgements = {name: rows for name, (rows, _) in per_judge.items()}
    results: dict[str, Any] = {"judges": list(judgements), "n_judges": len(judgements), "per_judge": {}}
    for name, (rows, usage) in per_judge.items():
        statuses = Counter(r["status"] for r in rows)
        results["per_judge"][name] = {
            "scores": score_summaries(rows, dimensions, bootstrap),
            "verdicts": statuses["ok"],
            "parse_failures": statuses["parse_failure"],
            "request_failures": statuses["request_failure"],
            "usage": usage,
        }
        if not statuses["ok"]:
            log.warning("judge %s gave no verdict on any session: the ensemble's means are the other judges'", name)
    sessions = combined(judgements, dimensions)
    counts = Counter(s["judges"] for s, r in zip(sessions, next(iter(judgements.values()))) if r["status"] in JUDGED)
    results["judges_per_session"] = dict(sorted(counts.items()))
    results["agreement"] = agreement(judgements, dimensions)
    return sessions, results


def flip_rate(compared: Sequence[Mapping[str, Any]], dimensions: Sequence[str]) -> dict[str, Any]:
    """Of ``judge_pairwise``'s judgements: per dimension and pooled (``overall``), the sessions with both orders
    parsed (``pairs``), those whose outcome changes with the swap (``flipped``) and their share (``rate``)."""
    orders: dict[str, list[Mapping[str, str]]] = {}
    for row in compared:
        if row["outcomes"] is not None:
            orders.setdefault(row["id"], []).append(row["outcomes"])
    both = [pair for pair in orders.values() if len(pair) == 2]
    per = {d: rate(sum(a[d] != b[d] for a, b in both), len(both)) for d in dimensions}
    return {"dimensions": per, "overall": pooled(per)}


def rate(flipped: int, pairs: int) -> dict[str, Any]:
    return {"pairs": pairs, "flipped": flipped, "rate": flipped / pairs if pairs else None}


def pooled(rates: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return rate(sum(r["flipped"] for r in rates.values()), sum(r["pairs"] for r in rates.values()))


def pairwise_ensemble(
    per_judge: Mapping[str, tuple[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]], Mapping[str, Any]]],
    dimensions: Sequence[str],
    bootstrap: Mapping[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The judges' pairwise results as one (``judge_pairwise``'s form): per session and dimension the mean over
    the judges of each judge's session score (its orders' mean), summarised; failures and position-inconsistent
    sessions summed over the judges; each judge's own results and flip rate under ``per_judge``. The judgements
    of every judge, each named (for pairwise.jsonl)."""
    first = next(iter(per_judge.values()))[0][0]
    results: dict[str, Any] = {
        "shared_sessions": first["shared_sessions"],
        "cut_short": first["cut_short"],
        "failed_checks": first["failed_checks"],
        "parse_failures": sum(r["parse_failures"] for (r, _), _ in per_judge.values()),
        "request_failures": sum(r["request_failures"] for (r, _), _ in per_judge.values()),
        "per_judge": {
            name: {**r, "flip_rate": flip_rate(c, dimensions), "usage": u} for name, ((r, c), u) in per_judge.items()
        },
        "dimensions": {},
    }
    flips = [r["flip_rate"]["dimensions"] for r in results["per_judge"].values()]
    by_dimension = {d: pooled({str(k): f[d] for k, f in enumerate(flips)}) for d in dimensions}
    results["flip_rate"] = {"dimensions": by_dimension, "overall": pooled(by_dimension)}  # pooled over the judges
    scores: dict[str, dict[str, list[float]]] = {}  # session -> dimension -> each judge's session score
    for (_, compared), _ in per_judge.values():
        by_session: dict[str, list[Mapping[str, str]]] = {}
        for row in compared:
            by_session.setdefault(row["id"], []).extend([row["outcomes"]] if row["outcomes"] else [])
        for sid, seen in by_session.items():
            for d in dimensions:
                if seen:
                    scores.setdefault(sid, {}).setdefault(d, []).append(sum(OUTCOME[o[d]] for o in seen) / len(seen))
    sessions = sorted({row["id"] for (_, c), _ in per_judge.values() for row in c})
    for d in dimensions:
        means = [(sum(v) / len(v)) if (v := scores.get(sid, {}).get(d)) else None for sid in sessions]
        inconsistent = sum(r["dimensions"][d]["position_inconsistent"] for (r, _), _ in per_judge.values())
        results["dimensions"][d] = {**summarize(means, **bootstrap), "position_inconsistent": inconsistent}
    rows = [{**row, "judge": name} for name, ((_, compared), _) in per_judge.items() for row in compared]
    return results, rows


def named_rows(per_judge: Mapping[str, tuple[Sequence[Mapping[str, Any]], Any]]) -> list[dict[str, Any]]:
    """Every judge's judgements, each with its judge's name (judgements.jsonl)."""
    return [{"judge": name, **row} for name, (rows, _) in per_judge.items() for row in rows]


def attach_ensemble(conversation: dict[str, Any], ensemble: Mapping[str, Any]) -> None:
    """The ensemble's results in the run's ``conversation`` results: its failures counted per judgement (each
    judge's), and the scale named as the judges' mean."""
    judges = ensemble["per_judge"].values()
    conversation["ensemble"] = dict(ensemble)
    conversation["judge_parse_failures"] = sum(j["parse_failures"] for j in judges)
    conversation["judge_request_failures"] = sum(j["request_failures"] for j in judges)
    conversation["scale"] = (
        f"1 (poor) to 5 (excellent), per session the mean of the judges with a verdict ({len(judges)} judges)"
    )


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mean(summary: Mapping[str, Any]) -> str:
    if summary["mean"] is None:
        return "-"
    return f"{summary['mean']:.2f} [{summary['ci_low']:.2f}, {summary['ci_high']:.2f}] (n={summary['n']})"


def _flips(flip: Mapping[str, Any]) -> str:
    return f"{_number(flip['rate'], 2)} ({flip['flipped']}/{flip['pairs']})"


def ensemble_report(c: Mapping[str, Any]) -> str:
    """report.md: each judge's scores, failures and agreement (with an ensemble), and the pairwise flip rates."""
    text = ""
    if "ensemble" in c:
        e = c["ensemble"]
        names = list(e["per_judge"])
        head = "| dimension | ensemble | " + " | ".join(f"`{n}`" for n in names) + " |"
        rows = [
            f"| {d} | {_mean(s)} | " + " | ".join(_mean(e["per_judge"][n]["scores"][d]) for n in names) + " |"
            for d, s in c["judge"].items()
        ]
        counts = "; ".join(
            f"`{n}` {j['verdicts']} verdicts, {j['parse_failures']} unparsed, {j['request_failures']} unanswered"
            for n, j in e["per_judge"].items()
        )
        a = e["agreement"]
        text += (
            f"\n\nJudge ensemble ({e['n_judges']} judges): per judge, its mean [95% bootstrap CI] over the sessions it "
            "gave a verdict on (a failed verdict is left out, never a 0); ensemble: per session the mean of the "
            f"judges with a verdict, then over sessions. Judges with a verdict per judged session: "
            f"{e['judges_per_session']}.\n\n{head}\n|{' --- |' * (len(names) + 2)}\n"
            + "\n".join(rows)
            + f"\n\nVerdicts per judge: {counts}.\n\nAgreement among the judges, Krippendorff's alpha over "
            f"(session, dimension) units ({a['pairable_units']} with two verdicts or more): interval "
            f"{_number(a['interval'])}, ordinal {_number(a['ordinal'])}; per dimension (interval): "
            + ", ".join(f"{d} {_number(v['interval'])}" for d, v in a["by_dimension"].items())
            + "."
        )
    if "pairwise" in c:
        p = c["pairwise"]
        flip = p["flip_rate"]
        text += (
            "\n\nPairwise flip rate (share of sessions, both orders parsed, whose verdict changes when the two "
            f"sessions swap places): overall {_flips(flip['overall'])}; "
            + ", ".join(f"{d} {_flips(f)}" for d, f in flip["dimensions"].items())
            + (". Per judge:" if "per_judge" in p else ".")
        )
        for name, j in (p["per_judge"] if "per_judge" in p else {}).items():
            dimensions = ", ".join(f"{d} {_flips(f)}" for d, f in j["flip_rate"]["dimensions"].items())
            text += (
                f"\n- `{name}`: overall {_flips(j['flip_rate']['overall'])}; {dimensions} "
                f"({j['parse_failures']} unparsed, {j['request_failures']} unanswered)"
            )
    return text
