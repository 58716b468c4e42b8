"""Agreement of a reward model's score pairs with a reference judge's (MMRole Tables 4, 9, 10 and section 6.4).

MMRole scores an answer by the ratio a/b of the pair (a: evaluated answer, b: ground truth). Per metric and
pooled over all metrics (``overall``): the scoring success rate, and MAE, RMSE and Pearson's r between the
model's and the reference's ratios. A review whose pair cannot be read is scored by ``parse_failure``:

- ``random_score`` (the paper: "The score is random if the model fails to score"): the score a/b is a seeded
  uniform draw from [0, 1). The paper names no distribution; this is the reading that fits its Table 4
  (see ``experiments/mmrole/README.md``);
- ``random_pair``: a and b each a seeded uniform integer from 1 to 10 (the prompt's scale), the score a/b;
- ``exclude``: the sample is left out.

``scored_only`` gives the statistics over the readable samples alone, on the ratio and on the raw scores
(a and b pooled). Cronbach's alpha comes twice: the paper's (queries are the items, the evaluated models
the cases, a model's score on a query the mean of its metric scores) and with the metrics as items and
the answered records as cases. Undefined values (no samples, constant data) are None.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Pair = tuple[float, float]
SCORE_RANGE = (1, 10)
PARSE_FAILURE_POLICIES = ("random_score", "random_pair", "exclude")


@dataclass(frozen=True)
class ScoredSample:
    """One judged sample: the evaluated model, the query it answered, the metric, the reference pair and the
    model's (None: the model failed to score)."""

    model: str
    query: str
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


def model_scores(samples: Sequence[ScoredSample], policy: str, seed: int) -> list[float | None]:
    """Each sample's score a/b as ``policy`` counts it (None: left out); random draws are seeded and made
    in sample order, one per failure."""
    if policy not in PARSE_FAILURE_POLICIES:
        raise ValueError(f"evaluator.parse_failure: expected one of {PARSE_FAILURE_POLICIES}, got {policy!r}")
    rng = random.Random(seed)
    low, high = SCORE_RANGE
    scores: list[float | None] = []
    for s in samples:
        if s.predicted is not None:
            scores.append(ratio(s.predicted))
        elif policy == "random_score":
            scores.append(rng.random())
        elif policy == "random_pair":
            scores.append(rng.randint(low, high) / rng.randint(low, high))
        else:
            scores.append(None)
    return scores


def _errors(reference: Sequence[float], predicted: Sequence[float]) -> dict[str, float | None]:
    return {
        "mae": mae(predicted, reference),
        "rmse": rmse(predicted, reference),
        "pearson": pearson(predicted, reference),
    }


def _group(samples: Sequence[ScoredSample], scores: Sequence[float | None]) -> dict[str, Any]:
    counted = [(ratio(s.reference), v) for s, v in zip(samples, scores) if v is not None]
    scored = [(s.reference, s.predicted) for s in samples if s.predicted is not None]
    return {
        "n": len(samples),
        "n_scored": len(scored),
        "n_counted": len(counted),
        "success_rate": len(scored) / len(samples) if samples else None,
        "ratio": _errors([r for r, _ in counted], [v for _, v in counted]),
        "scored_only": {
            "ratio": _errors([ratio(r) for r, _ in scored], [ratio(p) for _, p in scored]),
            "raw": _errors([x for r, _ in scored for x in r], [x for _, p in scored for x in p]),
        },
    }


def _table(samples: Sequence[ScoredSample], values: Sequence[float | None], metrics: Sequence[str]) -> dict:
    """(model, query) -> metric -> value, for the records judged on every metric with every value present."""
    table: dict[tuple[str, str], dict[str, float | None]] = {}
    for s, v in zip(samples, values):
        table.setdefault((s.model, s.query), {})[s.metric] = v
    return {
        key: row
        for key, row in table.items()
        if all(m in row for m in metrics) and all(row[m] is not None for m in metrics)
    }


def alpha_over_queries(samples: Sequence[ScoredSample], values: Sequence[float | None], metrics: Sequence[str]) -> dict:
    """The paper's alpha: items = queries, cases = evaluated models, a cell = the mean over ``metrics`` of
    the model's scores on the query; over the queries every model has a complete score for."""
    table = _table(samples, values, metrics)
    models = sorted({s.model for s in samples})
    queries = sorted({q for _, q in table})
    shared = [q for q in queries if all((m, q) in table for m in models)]
    items = [[sum(table[m, q].values()) / len(metrics) for m in models] for q in shared]
    return {"alpha": cronbach_alpha(items) if items else None, "models": len(models), "queries": len(shared)}


def alpha_over_metrics(samples: Sequence[ScoredSample], values: Sequence[float | None], metrics: Sequence[str]) -> dict:
    """Items = metrics, cases = the answered records (model, query) with a score on every metric."""
    rows = list(_table(samples, values, metrics).values())
    items = [[row[m] for row in rows] for m in metrics]
    return {"alpha": cronbach_alpha(items) if rows else None, "records": len(rows)}


def agreement(samples: Sequence[ScoredSample], metrics: Sequence[str], policy: str, seed: int) -> dict[str, Any]:
    """Per-metric and overall agreement (see the module docstring), the failure count and the alphas."""
    scores = model_scores(samples, policy, seed)
    reference = [ratio(s.reference) for s in samples]
    per_metric: dict[str, Any] = {}
    for metric in metrics:
        chosen = [i for i, s in enumerate(samples) if s.metric == metric]
        per_metric[metric] = _group([samples[i] for i in chosen], [scores[i] for i in chosen])
    return {
        "metrics": list(metrics),
        "per_metric": per_metric,
        "overall": _group(samples, scores),
        "parse_failure": policy,
        "parse_failures": sum(s.predicted is None for s in samples),
        "fill_seed": seed,
        "cronbach_alpha": {
            "queries_as_items": {
                "reference": alpha_over_queries(samples, reference, metrics),
                "model": alpha_over_queries(samples, scores, metrics),
            },
            "metrics_as_items": {
                "reference": alpha_over_metrics(samples, reference, metrics),
                "model": alpha_over_metrics(samples, scores, metrics),
            },
        },
    }
