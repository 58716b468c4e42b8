"""How far a judge agrees with people: a judge's verdicts against a file of human ratings, item by item.

An item is (record id, rubric, evaluated model). Pointwise items carry each annotator's score (numbers, any
scale); pairwise items each annotator's preferred response, ``a``, ``b`` or ``tie`` (coded +1, -1, 0 and
ordered b < tie < a). Compared with the humans' mean (their ``center``): Spearman's rho and Kendall's tau-b
(ties averaged / corrected), MAE and RMSE; with their majority label (a unique mode; items without one are
counted): accuracy and Cohen's kappa, unweighted and (ordinal) linearly and quadratically weighted;
Krippendorff's alpha (the ``krippendorff`` package) among the humans alone and with the judge as one more
annotator. Kappa and accuracy need categories: with ``level="interval"`` they are None. Biases:

- position: the share of items whose verdict is the same when the responses are shown in swapped order
  (``swapped`` verdicts, given in the original labels);
- length: Spearman's rho of the judge's verdict with the response length (pointwise) or the length difference
  a - b (pairwise), beside the humans' own;
- self-preference: for a judge of family F (``model_family``), pointwise: the judge's mean excess over the
  humans on F's outputs minus that on other models'; pairwise, over items where one response is F's: how much
  more often the judge picks F's than the humans' majority does.

Undefined values (too few items, constant data) are None.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rpbench.core.errors import RpbenchError
from rpbench.scoring.agreement import mae, pearson, rmse

PAIRWISE_CODES = {"a": 1.0, "tie": 0.0, "b": -1.0}
LEVELS = ("nominal", "ordinal", "interval")
Key = tuple[str, str, str]  # (record id, rubric, evaluated model or "")


@dataclass(frozen=True)
class HumanItem:
    key: Key
    ratings: tuple[float, ...]  # pairwise labels already coded
    pairwise: bool
    length: float | None = None  # pointwise: the response's; pairwise: a's minus b's (characters)
    models: tuple[str, ...] = ()  # pointwise: (evaluated,); pairwise: (model of a, model of b)

    @property
    def center(self) -> float:
        return sum(self.ratings) / len(self.ratings)

    @property
    def majority(self) -> float | None:
        counts = Counter(self.ratings).most_common()
        return counts[0][0] if len(counts) == 1 or counts[0][1] > counts[1][1] else None


@dataclass(frozen=True)
class JudgeVerdict:
    value: float
    swapped: float | None = None  # the verdict with the responses in swapped order, in the original labels


def model_family(name: str) -> str:
    """The leading letters of a model's name (after any ``org/``): gpt-4o -> gpt, Qwen2.5-7B -> qwen."""
    found = re.match(r"[a-z]+", name.rsplit("/", 1)[-1].lower())
    return found.group(0) if found else name.lower()


class RatingError(RpbenchError, ValueError):
    """A rating or verdict that is no number or label (the message names file, line, record and field)."""


def code(value: Any, pairwise: bool, where: str) -> float:
    """A rating or verdict as a number: a pairwise label's code, or the number itself."""
    if pairwise:
        if value not in PAIRWISE_CODES:
            raise RatingError(f"{where}: expected a pairwise label a, b or tie, got {value!r}")
        return PAIRWISE_CODES[value]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise RatingError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def average_ranks(values: Sequence[float]) -> list[float]:
    """Each value's rank in ascending order (1 = smallest); tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i : j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r of the average ranks."""
    return pearson(average_ranks(x), average_ranks(y)) if len(x) > 1 else None


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """(concordant - discordant) / sqrt((n0 - ties in x) (n0 - ties in y)) over all pairs."""
    concordant = discordant = tied_x = tied_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                tied_x += 1
                tied_y += 1
            elif dx == 0:
                tied_x += 1
            elif dy == 0:
                tied_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    pairs = n * (n - 1) / 2
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    return (concordant - discordant) / denominator if denominator > 0 else None


def cohen_kappa(a: Sequence[float], b: Sequence[float], weights: str | None = None) -> float | None:
    """Cohen's kappa of two raters over the categories either uses (in value order); ``weights``: None,
    ``linear`` or ``quadratic`` disagreement weights |i-j| or (i-j)^2 over the category positions."""
    categories = sorted(set(a) | set(b))
    if len(a) == 0 or len(categories) < 2:
        return None
    index = {c: i for i, c in enumerate(categories)}
    k = len(categories)
    observed = np.zeros((k, k))
    for u, v in zip(a, b, strict=True):
        observed[index[u], index[v]] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(1), observed.sum(0))
    i, j = np.indices((k, k))
    power = {None: None, "linear": 1, "quadratic": 2}[weights]
    w = (i != j).astype(float) if power is None else np.abs(i - j).astype(float) ** power
    disagreement = (w * expected).sum()
    return float(1 - (w * observed).sum() / disagreement) if disagreement > 0 else None


def krippendorff_alpha(rows: Sequence[Sequence[float | None]], level: str) -> float | None:
    """Krippendorff's alpha (``krippendorff.alpha``) of annotator rows x unit columns, None = not rated."""
    import krippendorff

    data = np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)
    pairable = (np.sum(~np.isnan(data), axis=0) >= 2).sum()
    if pairable < 1 or len(np.unique(data[~np.isnan(data)])) < 2:
        return None
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def _rater_rows(items: Sequence[HumanItem], judge: Sequence[float] | None) -> list[list[float | None]]:
    slots = max(len(item.ratings) for item in items)
    rows = [[item.ratings[s] if s < len(item.ratings) else None for item in items] for s in range(slots)]
    return rows + ([list(judge)] if judge is not None else [])


def self_preference(items: Sequence[HumanItem], verdicts: Sequence[float], family: str) -> dict[str, Any]:
    if not items[0].pairwise:
        known = [(i, v) for i, v in zip(items, verdicts) if i.models]
        own = [v - i.center for i, v in known if model_family(i.models[0]) == family]
        other = [v - i.center for i, v in known if model_family(i.models[0]) != family]
        excess = sum(own) / len(own) - sum(other) / len(other) if own and other else None
        return {"judge_family": family, "n_own": len(own), "n_other": len(other), "excess_over_humans": excess}
    judge_picks, human_picks = [], []
    for item, verdict in zip(items, verdicts):
        families = [model_family(m) for m in item.models]
        if len(families) != 2 or families.count(family) != 1 or item.majority is None:
            continue
        own = PAIRWISE_CODES["a"] if families[0] == family else PAIRWISE_CODES["b"]
        judge_picks.append(verdict == own)
        human_picks.append(item.majority == own)
    n = len(judge_picks)
    excess = (sum(judge_picks) - sum(human_picks)) / n if n else None
    return {"judge_family": family, "n_own": n, "excess_over_humans": excess}


def agreement(
    humans: Sequence[HumanItem], verdicts: Mapping[Key, JudgeVerdict], level: str, judge_family: str | None
) -> dict[str, Any]:
    """The statistics of the module docstring over the items that have both human ratings and a verdict."""
    if level not in LEVELS:
        raise ValueError(f"level of measurement: one of {LEVELS}, got {level!r}")
    if len({item.pairwise for item in humans}) > 1:
        raise ValueError("human ratings mix pointwise and pairwise items: give one kind per file")
    items = [item for item in humans if item.key in verdicts]
    out: dict[str, Any] = {
        "level": level,
        "pairwise": bool(humans and humans[0].pairwise),
        "n_human_items": len(humans),
        "n_compared": len(items),
        "n_without_verdict": len(humans) - len(items),
        "n_verdicts_without_humans": len(set(verdicts) - {item.key for item in humans}),
    }
    if not items:
        if humans:
            out["warning"] = (
                f"none of the {len(humans)} rated items has a judge verdict: items match on (id, rubric, model)"
            )
        return out
    judge = [verdicts[item.key].value for item in items]
    center = [item.center for item in items]
    with_majority = [(v, item.majority) for item, v in zip(items, judge) if item.majority is not None]
    categorical = level != "interval"
    out.update(
        spearman=spearman(judge, center),
        kendall_tau_b=kendall_tau_b(judge, center),
        mae=mae(judge, center),
        rmse=rmse(judge, center),
        n_without_majority=len(items) - len(with_majority),
        accuracy=sum(v == m for v, m in with_majority) / len(with_majority) if categorical and with_majority else None,
        krippendorff_alpha={
            "humans": krippendorff_alpha(_rater_rows(items, None), level),
            "humans_and_judge": krippendorff_alpha(_rater_rows(items, judge), level),
        },
    )
    pairs = ([v for v, _ in with_majority], [m for _, m in with_majority])
    out["cohen_kappa"] = {
        "unweighted": cohen_kappa(*pairs) if categorical else None,
        "linear": cohen_kappa(*pairs, "linear") if level == "ordinal" or out["pairwise"] else None,
        "quadratic": cohen_kappa(*pairs, "quadratic") if level == "ordinal" or out["pairwise"] else None,
    }
    swapped = [(verdicts[i.key].value, verdicts[i.key].swapped) for i in items if verdicts[i.key].swapped is not None]
    lengths = [(v, i.center, i.length) for i, v in zip(items, judge) if i.length is not None]
    out["bias"] = {
        "position": {
            "n": len(swapped),
            "swap_consistency": sum(a == b for a, b in swapped) / len(swapped) if swapped else None,
        },
        "length": {
            "n": len(lengths),
            "judge_spearman": spearman([v for v, _, _ in lengths], [n for _, _, n in lengths]) if lengths else None,
            "humans_spearman": spearman([c for _, c, _ in lengths], [n for _, _, n in lengths]) if lengths else None,
        },
        "self_preference": self_preference(items, judge, judge_family) if judge_family else None,
    }
    return out
