"""Pearson and Spearman correlations (scipy.stats) between a generalization metric and judge scores,
with percentile bootstrap confidence intervals.

Inputs are mappings keyed by what was measured (e.g. (model, category)); the keys must match, so no
pair is dropped silently. Score setting: R-EMI vs WinRate per (model, category). Drop setting: R-EMID
vs WinRate difference per (model, shifted category), the difference taken as WinRate(ID) -
WinRate(shifted) so that both are positive under degradation (``winrate_drop``).

The bootstrap resamples the points (pairs) with replacement, ``n_resamples`` times from a seeded
``numpy.random.default_rng``, and takes the percentile interval of each coefficient: what
``scipy.stats.bootstrap(..., paired=True, method="percentile")`` computes with the same generator. A
resample whose coefficient is undefined (a constant resample) is left out of the percentiles and
counted in ``undefined_resamples``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    undefined_resamples: int


@dataclass(frozen=True)
class Correlation:
    pearson_r: float
    pearson_p: float
    pearson_ci: Interval
    spearman_rho: float
    spearman_p: float
    spearman_ci: Interval
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(stats.pearsonr(x, y).statistic)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return float(stats.spearmanr(x, y).statistic)


def bootstrap_interval(
    x: np.ndarray,
    y: np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], float],
    n_resamples: int,
    seed: int,
    confidence: float,
) -> Interval:
    """Percentile interval of ``statistic`` over ``n_resamples`` resamples of the (x, y) pairs (module docstring)."""
    if n_resamples < 1 or not 0 < confidence < 1:
        raise ValueError(f"bootstrap: n_resamples >= 1 and 0 < confidence < 1, got {n_resamples}, {confidence}")
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, len(x), (n_resamples, len(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        values = np.array([statistic(x[i], y[i]) for i in indices])
    defined = values[np.isfinite(values)]
    undefined = int(n_resamples - defined.size)
    if defined.size == 0:
        return Interval(None, None, undefined)
    alpha = (1 - confidence) / 2
    low, high = np.percentile(defined, [100 * alpha, 100 * (1 - alpha)])
    return Interval(float(low), float(high), undefined)


def correlate(
    metric: Mapping[Hashable, float],
    judge: Mapping[Hashable, float],
    n_resamples: int,
    seed: int,
    confidence: float,
) -> Correlation:
    """Correlations of ``metric[k]`` with ``judge[k]`` over their keys, which must be the same in both,
    with bootstrap intervals (module docstring)."""
    if set(metric) != set(judge):
        only_metric, only_judge = set(metric) - set(judge), set(judge) - set(metric)
        raise ValueError(
            f"keys differ: only in metric {sorted(map(str, only_metric))}, only in judge {sorted(map(str, only_judge))}"
        )
    if len(metric) < 3:
        raise ValueError(f"a correlation needs at least 3 pairs, got {len(metric)}")
    keys = list(metric)
    x = np.array([float(metric[k]) for k in keys])
    y = np.array([float(judge[k]) for k in keys])
    pearson_test, spearman_test = stats.pearsonr(x, y), stats.spearmanr(x, y)
    return Correlation(
        float(pearson_test.statistic),
        float(pearson_test.pvalue),
        bootstrap_interval(x, y, pearson, n_resamples, seed, confidence),
        float(spearman_test.statistic),
        float(spearman_test.pvalue),
        bootstrap_interval(x, y, spearman, n_resamples, seed, confidence),
        len(keys),
    )


def winrate_drop(id_winrate: float, shifted_winrate: float) -> float:
    """WinRate(ID) - WinRate(shifted): positive = degradation, the same sign convention as R-EMID."""
    return id_winrate - shifted_winrate
