"""How much of a conversation score's variance comes from the scenario, the policy, the user simulator and the
judge: the crossed random-effects components of a sweep (``rpbench.scoring.variance_components``), grouped by
source, with percentile bootstrap CIs over scenarios, and the scenarios and judges a mean score needs for a CI of
a given width.

Sources: a term of the scenario alone is ``scenario``; a term of one source (alone or with the scenario: its main
effect and how it changes per scenario) is that source's; the term of every factor is the ``residual`` (confounded
with a judge's noise on one session); the other terms (two or more sources) are ``interactions of sources``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rpbench.conversation_variance.design import SOURCES, Design
from rpbench.scoring.variance_components import (
    bootstrap_variances,
    crossed_components,
    mean_variance,
    smallest_count,
)

SCENARIO = "scenario"
INTERACTIONS = "interactions of sources"
RESIDUAL = "residual"
GROUPS = (SCENARIO, *SOURCES, INTERACTIONS, RESIDUAL)


def source_of(factors: Sequence[str], every: Sequence[str]) -> str:
    if set(factors) == set(every):
        return RESIDUAL
    rest = [f for f in factors if f != SCENARIO]
    return SCENARIO if not rest else rest[0] if len(rest) == 1 else INTERACTIONS


def interval(samples: np.ndarray, confidence: float) -> list[float]:
    tail = (1 - confidence) / 2 * 100
    return [float(np.percentile(samples, tail)), float(np.percentile(samples, 100 - tail))]


def shares(variances: np.ndarray) -> np.ndarray:
    """Each column's share of the row's total (0 where the total is 0)."""
    total = variances.sum(axis=-1, keepdims=True)
    return np.divide(variances, total, out=np.zeros_like(variances), where=total > 0)


def sample_sizes(
    variances: Mapping[tuple[str, ...], float],
    factors: Sequence[str],
    width: float,
    confidence: float,
    seeds: Mapping[str, int],
    max_judges: int,
) -> dict[str, Any]:
    """Per number of judges: the fewest scenarios whose mean score's CI (normal, ``confidence``) is at most
    ``width`` wide, with ``seeds`` policy and simulator seeds per scenario; or None, with the narrowest width any
    number of scenarios reaches."""
    z = statistics.NormalDist().inv_cdf((1 + confidence) / 2)
    target = (width / (2 * z)) ** 2
    rows = []
    for judges in range(1, (max_judges if "judge" in factors else 1) + 1):
        counts = {f: n for f, n in {**seeds, "judge": judges}.items() if f in factors}
        needed = smallest_count(variances, {**counts, SCENARIO: 1}, SCENARIO, target)
        floor = mean_variance({c: v for c, v in variances.items() if SCENARIO not in c}, counts)
        per_scenario = int(np.prod([n for f, n in counts.items() if f != "judge"]))
        rows.append(
            {
                "judges": judges,
                "scenarios": needed,
                "sessions": None if needed is None else needed * per_scenario,
                "narrowest_width": 2 * z * float(np.sqrt(floor)),
            }
        )
    reachable = [r["judges"] for r in rows if r["scenarios"] is not None]
    return {
        "ci_width": width,
        "confidence": confidence,
        "z": z,
        **{f"{s}_seeds": seeds[s] for s in ("policy", "simulator")},
        "by_judges": rows,
        "fewest_judges": reachable[0] if reachable else None,
    }


def analyse(
    design: Design,
    n_resamples: int,
    seed: int,
    confidence: float,
    width: float,
    seeds: Mapping[str, int],
    max_judges: int,
) -> dict[str, Any]:
    """The components, their sources, bootstrap CIs and the sample sizes, as plain data (variance.json)."""
    terms = crossed_components(design.scores, design.factors)
    point = np.array([t.variance for t in terms])
    resampled = bootstrap_variances(design.scores, design.factors, 0, n_resamples, seed)
    groups = [g for g in GROUPS if any(source_of(t.factors, design.factors) == g for t in terms)]
    member = np.array([[source_of(t.factors, design.factors) == g for t in terms] for g in groups], dtype=float)
    grouped, grouped_resampled = point @ member.T, resampled @ member.T
    term_rows = [
        {
            "term": t.name,
            "source": source_of(t.factors, design.factors),
            "df": t.df,
            "mean_square": t.mean_square,
            "estimate": t.estimate,
            "variance": t.variance,
            "share": float(shares(point)[i]),
            "ci": interval(resampled[:, i], confidence),
        }
        for i, t in enumerate(terms)
    ]
    source_rows = [
        {
            "source": g,
            "terms": [t.name for t in terms if source_of(t.factors, design.factors) == g],
            "variance": float(grouped[i]),
            "share": float(shares(grouped)[i]),
            "ci": interval(grouped_resampled[:, i], confidence),
            "share_ci": interval(shares(grouped_resampled)[:, i], confidence),
        }
        for i, g in enumerate(groups)
    ]
    variances = {t.factors: t.variance for t in terms}
    return {
        "dimension": design.dimension,
        "mean": float(design.scores.mean()),
        "design": {
            "factors": {f: len(design.levels[f]) for f in design.factors},
            "levels": {f: design.levels[f] for f in design.factors if f != SCENARIO},
            "one_level": design.fixed,
            "scores": int(design.scores.size),
            "scenarios_dropped": design.dropped,
        },
        "total_variance": float(point.sum()),
        "terms": term_rows,
        "sources": source_rows,
        "bootstrap": {"resampled": "scenarios", "n_resamples": n_resamples, "seed": seed, "confidence": confidence},
        "sample_size": sample_sizes(variances, design.factors, width, confidence, seeds, max_judges),
    }
