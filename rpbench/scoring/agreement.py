"""Agreement of a reward model's score pairs with a reference judge's (MMRole Tables 4, 9, 10 and section 6.4).

MMRole scores an answer by the ratio a/b of the pair (a: evaluated answer, b: ground truth). Per metric and
pooled over all metrics (``overall``): the scoring success rate, and MAE, RMSE and Pearson's r between the
model's and the reference's ratios, and between their raw scores (a and b pooled). Statistics come twice:
``with_random_fill`` (the paper: "The score is random if the model fails to score": a failed pair is
replaced by a seeded uniform draw of two integer scores from 1 to 10, counted) and ``scored_only`` (the
failures left out). Cronbach's alpha treats the metrics as items and the answered records as cases
(ratios), for the model's and the reference's scores. Undefined values (no samples, constant data) are None.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Pair = tuple[float, float]
SCORE_RANGE = (1, 10)


@dataclass(frozen=True)
class ScoredSample:
    """One judged sample: its case (the answered record), metric, the reference pair and the model's (None:
    the model failed to score)."""

    case: str
    metric: str
    reference: Pair
    predicted: Pair | None


def ratio(pair: Pair) -> float:
    return pair[0] / pair[1]


def mae(x: Sequence[float], y: Sequence[float]) -> float | None:
    return sum(abs(a - b) for a, b in zip(x, y, strict=True)) / len(x) if x else None


def rmse(x: Sequence[float], y: Sequence[float]) -> float | None:
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(x, y, strict=True)) / len(x)) if x else None


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than two points or when either side is constant."""
    if len(x) != len(y):
        raise ValueError(f"pearson: {len(x)} and {len(y)} values")
    if len(x) < 2:
        return None
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def _variance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def cronbach_alpha(items: Sequence[Sequence[float]]) -> float | None:
    """k/(k-1) * (1 - sum of item variances / variance of the case totals); ``items[j][i]`` is item j's
    score of case i. None with fewer than two items or cases, or constant totals."""
    k = len(items)
    n = len(items[0]) if items else 0
    if any(len(item) != n for item in items):
        raise ValueError("cronbach_alpha: every item needs a score for every case")
    if k < 2 or n < 2:
        return None
    totals = [sum(item[i] for item in items) for i in range(n)]
    total_variance = _variance(totals)
    if total_variance == 0:
        return None
    return k / (k - 1) * (1 - sum(_variance(item) for item in items) / total_variance)


def random_pair(rng: random.Random) -> Pair:
    low, high = SCORE_RANGE
    return float(rng.randint(low, high)), float(rng.randint(low, high))


def filled(samples: Sequence[ScoredSample], seed: int) -> list[Pair]:
    """Each sample's predicted pair, failures replaced by seeded random pairs (drawn in sample order)."""
    rng = random.Random(seed)
    return [s.predicted if s.predicted is not None else random_pair(rng) for s in samples]


def _errors(reference: Sequence[Pair], predicted: Sequence[Pair]) -> dict[str, dict[str, float | None]]:
    ref_ratio, pred_ratio = [ratio(p) for p in reference], [ratio(p) for p in predicted]
    ref_raw, pred_raw = [x for p in reference for x in p], [x for p in predicted for x in p]
    return {
        "ratio": {
            "mae": mae(pred_ratio, ref_ratio),
            "rmse": rmse(pred_ratio, ref_ratio),
            "pearson": pearson(pred_ratio, ref_ratio),
        },
        "raw": {"mae": mae(pred_raw, ref_raw), "rmse": rmse(pred_raw, ref_raw), "pearson": pearson(pred_raw, ref_raw)},
    }


def _group(samples: Sequence[ScoredSample], fill: Sequence[Pair]) -> dict[str, Any]:
    scored = [(s.reference, s.predicted) for s in samples if s.predicted is not None]
    return {
        "n": len(samples),
        "n_scored": len(scored),
        "success_rate": len(scored) / len(samples) if samples else None,
        "with_random_fill": _errors([s.reference for s in samples], fill),
        "scored_only": _errors([r for r, _ in scored], [p for _, p in scored]),
    }


def _alphas(samples: Sequence[ScoredSample], fill: Sequence[Pair], metrics: Sequence[str]) -> dict[str, Any]:
    """Cronbach's alpha over ``metrics`` (items) for the cases judged on all of them."""
    cases: dict[str, dict[str, tuple[Pair, Pair, bool]]] = {}
    for s, f in zip(samples, fill):
        cases.setdefault(s.case, {})[s.metric] = (s.reference, f, s.predicted is not None)
    complete = [c for c in cases.values() if all(m in c for m in metrics)]
    scored = [c for c in complete if all(c[m][2] for m in metrics)]

    def alpha(rows: list, which: int) -> float | None:
        return cronbach_alpha([[ratio(row[m][which]) for row in rows] for m in metrics])

    return {
        "cases": len(complete),
        "reference": alpha(complete, 0),
        "with_random_fill": alpha(complete, 1),
        "scored_only": alpha(scored, 1),
        "scored_only_cases": len(scored),
    }


def agreement(samples: Sequence[ScoredSample], metrics: Sequence[str], seed: int) -> dict[str, Any]:
    """Per-metric and overall agreement (see the module docstring), the number of random fills and alphas."""
    fill = filled(samples, seed)
    per_metric: dict[str, Any] = {}
    for metric in metrics:
        chosen = [i for i, s in enumerate(samples) if s.metric == metric]
        per_metric[metric] = _group([samples[i] for i in chosen], [fill[i] for i in chosen])
    return {
        "metrics": list(metrics),
        "per_metric": per_metric,
        "overall": _group(samples, fill),
        "random_fills": sum(s.predicted is None for s in samples),
        "fill_seed": seed,
        "cronbach_alpha": _alphas(samples, fill, metrics),
    }
