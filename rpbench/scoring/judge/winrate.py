"""RPGBench WinRate: pairwise judging of the model's response against the golden one, position-swapped,
averaged over a judge ensemble.

Each (record, judge) is asked twice, the model's response first as "A" and then second. A reply must
be exactly ``A`` or ``B`` (optionally labelled / decorated); anything else is re-asked and finally
counted as a parse failure, never as a loss. WinRate = model wins / parsed verdicts, over both
orders and every judge; per judge and per group (shift) too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rpbench.data.records import EvalExample
from rpbench.scoring.judge.client import JudgeRequest, ParsedReply, open_judge
from rpbench.scoring.judge.rolemrc_rubrics import render_dialogue

TASK = "rpgbench"
PROMPT_VERSION = "rpgbench-winrate-v1"
SYSTEM = (
    "You are judging a role-play conversation. Given the agent's character and the dialogue so far, decide "
    "which of two candidate agent responses is better: more in character, more engaging, more consistent "
    "with the dialogue. Answer with a single letter: A or B."
)
REASK = "Answer with exactly one letter: A or B."
_CHOICE = re.compile(r"^(?:(?:answer|verdict|better)\s*[:\-]?\s*)?[\*\"'`(\[]*([AB])[\*\"'`)\]]*\.?$", re.IGNORECASE)


def parse_choice(text: str) -> str | None:
    """``"A"`` or ``"B"`` when the reply is exactly that letter (optionally labelled / decorated), else None."""
    match = _CHOICE.match(text.strip())
    return match.group(1).upper() if match else None


def pairwise_messages(example: EvalExample, first: str, second: str) -> tuple[dict[str, str], ...]:
    user = (
        f"## Conversation\n{render_dialogue(example.prompt)}\n\n"
        f"## Response A\n{first}\n\n## Response B\n{second}\n\nWhich response is better? Answer A or B."
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


def model_won(reply: ParsedReply, model_first: bool) -> float | None:
    if reply.value is None:
        return None
    return float(reply.value == ("A" if model_first else "B"))


def judge_winrate(
    examples: Sequence[EvalExample],
    predictions: Mapping[str, str],
    judges: Sequence[Mapping[str, Any]],
    groups: Sequence[str],
) -> dict[str, Any]:
    """WinRate of ``predictions`` against the golden responses over ``judges`` (``judge`` configs) and
    both orders; overall, per judge and per group (``groups[i]`` is record i's). Records per judgement
    in ``records``."""
    if not judges:
        raise ValueError("WinRate needs at least one judge config")
    missing = [e.id for e in examples if e.id not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} test records have no prediction (first: {missing[:5]})")
    records: list[dict[str, Any]] = []
    per_judge: dict[str, Any] = {}
    for k, judge_cfg in enumerate(judges):
        with open_judge(judge_cfg) as client:
            max_tokens = client.config.max_tokens_for(TASK)
            asks = [(e, model_first) for e in examples for model_first in (True, False)]
            requests = [
                JudgeRequest(
                    pairwise_messages(e, *((predictions[e.id], e.reference)[:: 1 if first else -1])),
                    max_tokens,
                    PROMPT_VERSION,
                )
                for e, first in asks
            ]
            replies = client.judge_parsed(requests, parse_choice, REASK, desc=f"WinRate judge {k}")
            name = f"{k}:{client.config.model}"
            stats = client.stats.as_dict()
        wins = [model_won(r, first) for r, (_, first) in zip(replies, asks)]
        per_judge[name] = {
            **tally(wins),
            "parse_failures": sum(r.status == "parse_failure" for r in replies),
            "request_failures": sum(r.status == "request_failure" for r in replies),
            "judge_stats": stats,
        }
        records += [
            {"id": e.id, "judge": name, "model_first": first, "reply": r.text, "status": r.status, "model_won": w}
            for (e, first), r, w in zip(asks, replies, wins)
        ]
    group_of = {e.id: g for e, g in zip(examples, groups)}
    by_group: dict[str, list] = {}
    for row in records:
        by_group.setdefault(group_of[row["id"]], []).append(row["model_won"])
    return {
        "prompt_version": PROMPT_VERSION,
        "overall": {
            **tally([row["model_won"] for row in records]),
            "parse_failures": sum(j["parse_failures"] for j in per_judge.values()),
            "request_failures": sum(j["request_failures"] for j in per_judge.values()),
        },
        "per_judge": per_judge,
        "groups": {g: tally(w) for g, w in by_group.items()},
        "records": records,
    }
