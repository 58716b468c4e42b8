"""A judge's measured self-preference: how much a judge of the evaluated model's family scores the run above the
judges of other families, on the very sessions they all scored.

Per session and dimension: the family judge's score minus the mean of the other families' judges' scores (those
with a verdict on that session); a session where the family judge or every other judge gave no verdict is left out
and counted. ``overall``: the same on each judge's session overall (its mean over the dimensions). Summarised with
``paired_bootstrap`` over the sessions (the family judge's scores against the others' means, resampled together):
the mean difference, its CI and p-value. With ``evaluator.pairwise_with`` the same on each judge's session win rate
(the mean of its orders' outcomes, win 1, tie 0.5). Judges of the policy's family other than the one measured are
no reference for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.eval.benchmarks.conversation.pairwise import OUTCOME
from rpbench.eval.stats import paired_bootstrap
from rpbench.scoring.judge.parties import Party, model_family, policy_family

Scores = Sequence[Mapping[str, float | None]]  # per session (one order for all judges): dimension -> score


def family_judges(names: Sequence[str], parties: Sequence[Party], family: str | None, evaluated: str) -> list[str]:
    """The names of the judges (``names``, in the order of ``parties``) of the evaluated model's family."""
    shared = policy_family(family, evaluated)
    return [n for n, p in zip(names, parties) if shared is not None and model_family(p.model) == shared]


def with_overall(scores: Scores, dimensions: Sequence[str]) -> list[dict[str, float | None]]:
    """Each session's scores with ``overall``, their mean over ``dimensions`` (None when one is missing)."""
    out = []
    for row in scores:
        values = [row[d] for d in dimensions]
        overall = None if None in values else sum(values) / len(dimensions)
        out.append({**{d: row[d] for d in dimensions}, "overall": overall})
    return out


def excess(
    by_judge: Mapping[str, Scores], judge: str, others: Sequence[str], keys: Sequence[str], bootstrap: Mapping
) -> dict[str, Any]:
    """``judge``'s scores against the mean of ``others``' per session: per key, ``paired_bootstrap``'s delta (the
    mean over sessions of the judge's score minus the others' mean), CI, p-value and counts."""
    out = {}
    for key in keys:
        mine = [row[key] for row in by_judge[judge]]
        theirs = []
        for rows in zip(*(by_judge[o] for o in others)):
            given = [r[key] for r in rows if r[key] is not None]
            theirs.append(sum(given) / len(given) if given else None)
        out[key] = paired_bootstrap(theirs, mine, **bootstrap)
    return out


def self_preference(
    by_judge: Mapping[str, Scores], own: Sequence[str], dimensions: Sequence[str], bootstrap: Mapping
) -> dict[str, Any]:
    """Per judge of the policy's family (``own``): its excess over the other families' judges per dimension and
    ``overall``, or why it could not be measured (no judge of another family, or no session both scored)."""
    others = [name for name in by_judge if name not in own]
    keys = [*dimensions, "overall"]
    out: dict[str, Any] = {}
    scored = {n: with_overall(r, dimensions) for n, r in by_judge.items()}
    for judge in own:
        if not others:
            out[judge] = {"measured": False, "against": [], "reason": "no judge of another family scored the sessions"}
            continue
        found = excess(scored, judge, others, keys, bootstrap)
        if found["overall"]["n"] == 0:
            reason = "no session has a verdict of both it and a judge of another family"
            out[judge] = {"measured": False, "against": others, "reason": reason}
            continue
        out[judge] = {"measured": True, "against": others, "dimensions": found}
    return out


def win_rates(compared: Sequence[Mapping[str, Any]], sessions: Sequence[str], dimensions: Sequence[str]) -> list:
    """One judge's pairwise judgements as its win rate per session (``sessions``' order) and dimension: the mean
    of its parsed orders' outcomes (win 1, tie 0.5, loss 0), None without one."""
    seen: dict[str, list[Mapping[str, str]]] = {}
    for row in compared:
        seen.setdefault(row["id"], []).extend([row["outcomes"]] if row["outcomes"] else [])
    return [
        {d: sum(OUTCOME[o[d]] for o in seen[s]) / len(seen[s]) if seen.get(s) else None for d in dimensions}
        for s in sessions
    ]


def _signed(value: float) -> str:
    return f"{value:+.2f}"


def _delta(found: Mapping[str, Any]) -> str:
    if found["delta"] is None:
        return "-"
    return f"{_signed(found['delta'])} [{_signed(found['ci_low'])}, {_signed(found['ci_high'])}] (n={found['n']})"


def preference_warnings(measured: Mapping[str, Any], family: str, what: str) -> list[str]:
    """One warning per family judge of ``measured`` (``self_preference``'s) with judges of other families beside it
    (without, the startup warning said it cannot be measured): its overall excess with the CI, or why it could not
    be measured. ``what``: ``scores`` (1-5 session scores) or ``win rates`` (pairwise)."""
    out = []
    for judge, found in measured.items():
        if not found["against"]:
            continue
        head = f"judge {judge} is of the policy's family ({family})"
        if not found["measured"]:
            out.append(
                f"{head}: its self-preference in {what} could not be measured ({found['reason']}); add a judge of "
                "another family to evaluator.judges to measure it"
            )
            continue
        o = found["dimensions"]["overall"]
        unit = "on the 1-5 scale" if what == "scores" else "in win rate"
        out.append(
            f"{head}: it {'scores this run' if what == 'scores' else 'gives this run a win rate'} "
            f"{_signed(o['delta'])} [{_signed(o['ci_low'])}, {_signed(o['ci_high'])}] above the other judges "
            f"({unit}, overall: mean over {o['n']} sessions of its score minus the other families' judges' mean, "
            f"paired bootstrap CI; {o['n_missing']} sessions without both)"
        )
    return out


def report(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """report.md: per measured family judge and kind (``scores``, ``win rates``), its excess per dimension."""
    text = ""
    for key, measured in sections.items():
        what = key.replace("_", " ")
        for judge, found in measured.items():
            if not found["measured"]:
                text += f"\n\nSelf-preference of `{judge}` in {what}: not measured ({found['reason']})."
                continue
            rows = "\n".join(f"| {d} | {_delta(v)} | {_number(v['p_value'])} |" for d, v in found["dimensions"].items())
            against = ", ".join(f"`{o}`" for o in found["against"])
            text += (
                f"\n\nSelf-preference of `{judge}` (of the policy's family) in {what}: per session its value minus "
                f"the mean of {against}, then the mean over sessions [95% paired bootstrap CI] (n: sessions with "
                f"both).\n\n| dimension | excess | p |\n| --- | --- | --- |\n{rows}"
            )
    return text


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def of_run(
    judged: Mapping[str, Scores],
    compared: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    parties: Sequence[Party],
    policy: tuple[str | None, str],
    dimensions: Sequence[str],
    bootstrap: Mapping[str, Any],
) -> dict[str, Any] | None:
    """A run's self-preference results (None: no judge of the policy's family): the family, per family judge its
    excess in ``scores`` (``judged``: each judge's session scores, the order of ``parties``) and, with pairwise
    judgements (``compared``: each judge's rows), in ``win_rates``; the warnings they make."""
    names = list(judged)
    own = family_judges(names, parties, *policy)
    if not own:
        return None
    family = policy_family(*policy)
    out: dict[str, Any] = {"family": family, "scores": self_preference(judged, own, dimensions, bootstrap)}
    warned = preference_warnings(out["scores"], family, "scores")
    if compared is not None:
        sessions = sorted({row["id"] for rows in compared.values() for row in rows})
        rates = {name: win_rates(rows, sessions, dimensions) for name, rows in compared.items()}
        out["win_rates"] = self_preference(rates, own, dimensions, bootstrap)
        warned += preference_warnings(out["win_rates"], family, "win rates")
    out["warnings"] = warned
    return out
