"""RPGBench WinRate: pairwise judging of the model's response against the golden one, position-swapped,
per judge, and the judge ensemble's WinRate as the mean of the judges' WinRates (the paper averages an
ensemble of three judges).

Each judge sees the agent character, the user persona and the dialogue context (from the record's
``meta``), then the two candidates. Each (record, judge) is asked twice, the model's response first
as "A" and then second. A reply must be exactly ``A`` or ``B`` (optionally labelled / decorated);
anything else is re-asked and finally counted as a parse failure, never as a loss. Per judge:
WinRate = model wins / parsed verdicts over both orders, overall, per category (the subtype the paper
estimates on: IDTest or the subset tag) and per shift. Ensemble: the mean of the WinRates of the judges
with a verdict there. Records with an empty reply are not judged (``replied_records``: the R-EMID analysis
leaves out the same ones); each ensemble tally counts them (``excluded_empty_predictions``).

Per shift type, two conventions, each under its own name (the paper does not state its grouping):
``by_shift`` pools the shift's records (a large subtype weighs more); ``by_shift_mean_of_categories`` is
the mean of its categories' ensemble WinRates, the convention of the R-EMI / R-EMID roll-ups
(``analysis.rollups``), so the two sides of a per-shift comparison are grouped alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.core.errors import DataFormatError
from rpbench.data.records import EvalExample
from rpbench.data.rpgbench import replied_records
from rpbench.scoring.chat.client import ChatRequest, ClientOpener, EndpointSettings, ParsedReply, open_client

PROMPT_VERSION = "rpgbench-winrate-v2"
SYSTEM = (
    "You are judging a role-play conversation. An agent plays the character described below for a user "
    "with the persona described below. Given the character, the persona and the dialogue so far, decide "
    "which of two candidate agent responses is the better next turn: more in character, better suited to "
    "this user, more engaging, more consistent with the dialogue. Answer with a single letter: A or B."
)
REASK = "Answer with exactly one letter: A or B."
_CHOICE = re.compile(r"^(?:(?:answer|verdict|better)\s*[:\-]?\s*)?[\*\"'`(\[]*([AB])[\*\"'`)\]]*\.?$", re.IGNORECASE)
META_KEYS = ("shift", "category", "persona", "character", "dialogue")
SPEAKERS = {"user": "User", "assistant": "Agent"}
RECORDS_SOURCE = "RPGBench test records"


def parse_choice(text: str) -> str | None:
    """``"A"`` or ``"B"`` when the reply is exactly that letter (optionally labelled / decorated), else None."""
    match = _CHOICE.match(text.strip())
    return match.group(1).upper() if match else None


def render_profile(value: Any) -> str:
    """A persona or character: a string as it is; an object as ``- key: value`` lines."""
    if isinstance(value, str):
        return value
    lines = (f"- {k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
    return "\n".join(lines)


def check_meta(example: EvalExample) -> None:
    """The meta fields the judge reads, each named when missing or malformed."""

    def bad(field: str, problem: str) -> DataFormatError:
        return DataFormatError(RECORDS_SOURCE, example.id, f"meta.{field}", problem)

    for key in META_KEYS:
        if key not in example.meta:
            raise bad(key, "missing (the WinRate judge needs shift, category, persona, character, dialogue)")
    for key in ("shift", "category"):
        if not isinstance(example.meta[key], str) or not example.meta[key]:
            raise bad(key, f"a non-empty string, got {example.meta[key]!r}")
    for key in ("persona", "character"):
        if not isinstance(example.meta[key], (str, Mapping)) or not example.meta[key]:
            raise bad(key, f"a non-empty string or object, got {example.meta[key]!r}")
    dialogue = example.meta["dialogue"]
    if not isinstance(dialogue, Sequence) or isinstance(dialogue, str) or not dialogue:
        raise bad("dialogue", f"a non-empty list of {{role, content}} turns, got {dialogue!r}")
    for k, turn in enumerate(dialogue):
        if not (isinstance(turn, Mapping) and turn.get("role") in SPEAKERS and isinstance(turn.get("content"), str)):
            raise bad(f"dialogue[{k}]", f"a {{role: user|assistant, content: str}} turn, got {turn!r}")
    if dialogue[-1]["role"] != "user":
        raise bad("dialogue", "must end on a user turn (the one the agent answers)")


def pairwise_messages(example: EvalExample, first: str, second: str) -> tuple[dict[str, str], ...]:
    """The request: character, persona and dialogue (from ``meta``), then candidates A and B."""
    meta = example.meta
    dialogue = "\n\n".join(f"{SPEAKERS[t['role']]}: {t['content']}" for t in meta["dialogue"])
    user = (
        f"## Agent character\n{render_profile(meta['character'])}\n\n"
        f"## User persona\n{render_profile(meta['persona'])}\n\n"
        f"## Dialogue so far\n{dialogue}\n\n"
        f"## Response A\n{first}\n\n## Response B\n{second}\n\n"
        "Which response is the better next agent turn? Answer A or B."
    )
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})


def tally(wins: Sequence[float | None]) -> dict[str, Any]:
    """n asked, judged, wins, parse/request failures (None = no verdict), winrate = wins / judged."""
    judged = [w for w in wins if w is not None]
    return {
        "n": len(wins),
        "judged": len(judged),
        "wins": sum(judged),
        "no_verdict": len(wins) - len(judged),
        "winrate": sum(judged) / len(judged) if judged else None,
    }


def ensemble(tallies: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ensemble over the judges' tallies of one group: the mean WinRate of the judges with a verdict
    there (None when none has), how many those are, and the judged / no-verdict / asked counts summed."""
    rates = [t["winrate"] for t in tallies if t["winrate"] is not None]
    return {
        "winrate": sum(rates) / len(rates) if rates else None,
        "n_judges": len(rates),
        "judged": sum(t["judged"] for t in tallies),
        "no_verdict": sum(t["no_verdict"] for t in tallies),
        "n": sum(t["n"] for t in tallies),
    }


def mean_of_categories(
    by_category: Mapping[str, Mapping[str, Any]], shift_of: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """shift -> the mean of its categories' ensemble WinRates (module docstring), with the categories; None
    when one of them has no WinRate (every judgement failed), which is named in ``without_winrate``."""
    out = {}
    for shift in sorted(set(shift_of.values())):
        categories = sorted(c for c, s in shift_of.items() if s == shift)
        rates = [by_category[c]["winrate"] for c in categories]
        lacking = [c for c, rate in zip(categories, rates) if rate is None]
        out[shift] = {
            "winrate": None if lacking else sum(rates) / len(rates),
            "categories": categories,
            "without_winrate": lacking,
        }
    return out


def model_won(reply: ParsedReply, model_first: bool) -> float | None:
    if reply.value is None:
        return None
    return float(reply.value == ("A" if model_first else "B"))


def _grouped(rows: Sequence[tuple[str, float | None]]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list] = {}
    for group, won in rows:
        groups.setdefault(group, []).append(won)
    return {g: tally(w) for g, w in sorted(groups.items())}


def judge_winrate(
    examples: Sequence[EvalExample],
    predictions: Mapping[str, str],
    judges: Sequence[EndpointSettings],
    max_tokens: int,
    opener: ClientOpener = open_client,
) -> dict[str, Any]:
    """WinRate of ``predictions`` against the golden responses for each of ``judges`` (``judge``
    configs, each opened by ``opener``: one with the local judge server handed in for ``judge=local``) over
    both orders, and the ensemble: overall, ``by_category``, ``by_shift`` (module docstring). Records per
    judgement in ``records``."""
    if not judges:
        raise ValueError("WinRate needs at least one judge config")
    replied = replied_records(examples, predictions)
    shift_of: dict[str, str] = {}
    for e in examples:
        check_meta(e)
        category, shift = e.meta["category"], e.meta["shift"]
        if shift_of.setdefault(category, shift) != shift:
            problem = f"{shift!r}, but other records of {category!r} have {shift_of[category]!r}"
            raise DataFormatError(RECORDS_SOURCE, e.id, "meta.shift", problem)
    asks = [(e, model_first) for e in replied.examples for model_first in (True, False)]
    records: list[dict[str, Any]] = []
    per_judge: dict[str, Any] = {}
    for k, judge_cfg in enumerate(judges):
        with opener(judge_cfg) as client:
            requests = [
                ChatRequest(
                    pairwise_messages(e, *((predictions[e.id], e.reference)[:: 1 if first else -1])),
                    max_tokens,
                    PROMPT_VERSION,
                )
                for e, first in asks
            ]
            replies = client.ask_parsed(requests, parse_choice, REASK, desc=f"WinRate judge {k}")
            name = f"{k}:{client.config.model}"
            stats = client.stats.as_dict()
        wins = [model_won(r, first) for r, (_, first) in zip(replies, asks)]
        per_judge[name] = {
            "overall": {
                **tally(wins),
                "parse_failures": sum(r.status == "parse_failure" for r in replies),
                "request_failures": sum(r.status == "request_failure" for r in replies),
            },
            "by_category": _grouped([(e.meta["category"], w) for (e, _), w in zip(asks, wins)]),
            "by_shift": _grouped([(e.meta["shift"], w) for (e, _), w in zip(asks, wins)]),
            "judge_stats": stats,
        }
        records += [
            {"id": e.id, "judge": name, "model_first": first, "reply": r.text, "status": r.status, "model_won": w}
            for (e, first), r, w in zip(asks, replies, wins)
        ]
    tallies = list(per_judge.values())
    excluded = replied.excluded
    categories = sorted(shift_of)
    shifts = sorted(set(shift_of.values()))

    def group(level: str, name: str, left_out: int) -> dict[str, Any]:
        # a group whose every record is empty has no tally: no WinRate there, its records counted
        judged = ensemble([t[level][name] for t in tallies if name in t[level]])
        return {**judged, "excluded_empty_predictions": left_out}

    by_category = {c: group("by_category", c, excluded[c]) for c in categories}
    return {
        "prompt_version": PROMPT_VERSION,
        "judges": list(per_judge),
        "per_judge": per_judge,
        "overall": {
            **ensemble([t["overall"] for t in tallies]),
            "parse_failures": sum(t["overall"]["parse_failures"] for t in tallies),
            "request_failures": sum(t["overall"]["request_failures"] for t in tallies),
            "excluded_empty_predictions": excluded.total(),
        },
        "by_category": by_category,
        "by_shift": {s: group("by_shift", s, sum(n for c, n in excluded.items() if shift_of[c] == s)) for s in shifts},
        "by_shift_mean_of_categories": mean_of_categories(by_category, shift_of),
        "shift_of": dict(sorted(shift_of.items())),
        "records": records,
    }
