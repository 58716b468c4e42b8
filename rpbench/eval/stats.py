"""Aggregate statistics over per-sample scores: mean, std, bootstrap CIs (scipy.stats.bootstrap:
percentile or BCa), paired tests.

Values are per-sample scores (metric values, 0/1 judge verdicts). ``None`` or NaN marks a sample that
has no score (e.g. an unparseable judge verdict): it is left out and counted in ``n_missing``.
Results are plain JSON-able dicts; statistics that are undefined (no samples) are ``None``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Statistic = Callable[..., Any]  # f(array, axis=-1) -> array, like np.mean
MAX_RESAMPLE_CELLS = 2**22  # bounds memory of one batch of resampled indices
METHODS = ("percentile", "BCa")


def present(values: Sequence[float | None]) -> np.ndarray:
    """The scores that are present (not None, not NaN) as a float array."""
    array = np.array([np.nan if v is None else v for v in values], dtype=float)
    return array[~np.isnan(array)]


def _bootstrap(
    samples: Sequence[np.ndarray], statistic: Statistic, n_resamples: int, confidence: float, seed: int, method: str
) -> tuple[float, float, np.ndarray | None]:
    """``scipy.stats.bootstrap`` of ``statistic`` over equal-length ``samples`` resampled with shared
    indices (paired); (low, high, bootstrap distribution). One sample, or a constant bootstrap
    distribution, is an interval of one point (scipy needs two values and leaves BCa undefined there)."""
    from scipy.stats import bootstrap

    if method not in METHODS:
        raise ValueError(f"bootstrap method must be one of {METHODS}, got {method!r}")
    n = len(samples[0])
    if n < 2:
        point = float(statistic(*samples, axis=-1))
        return point, point, None
    with warnings.catch_warnings(record=True) as caught:  # BCa on a constant distribution: answered below
        warnings.simplefilter("always")
        result = bootstrap(
            tuple(samples),
            statistic,
            n_resamples=n_resamples,
            batch=max(1, MAX_RESAMPLE_CELLS // n),
            confidence_level=confidence,
            method=method,
            paired=len(samples) > 1,
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
    dist = result.bootstrap_distribution
    if np.ptp(dist) == 0:
        return float(dist[0]), float(dist[0]), dist
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return float(result.confidence_interval.low), float(result.confidence_interval.high), dist


def bootstrap_ci(
    values: Sequence[float],
    statistic: Statistic = np.mean,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "percentile",
) -> tuple[float, float]:
    """Bootstrap confidence interval (``method``: percentile or BCa) of ``statistic(values)``."""
    sample = np.asarray(values, dtype=float)
    if sample.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    low, high, _ = _bootstrap([sample], statistic, n_resamples, confidence, seed, method)
    return low, high


def summarize(
    values: Sequence[float | None],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "percentile",
) -> dict[str, Any]:
    """n, n_missing, mean, std (sample, ddof=1), and the bootstrap CI of the mean."""
    sample = present(values)
    n = int(sample.size)
    summary: dict[str, Any] = {
        "n": n,
        "n_missing": len(values) - n,
        "mean": None,
        "std": None,
        "ci_low": None,
        "ci_high": None,
    }
    if n == 0:
        return summary
    low, high = bootstrap_ci(sample, n_resamples=n_resamples, confidence=confidence, seed=seed, method=method)
    summary.update(
        mean=float(sample.mean()), std=float(sample.std(ddof=1)) if n > 1 else None, ci_low=low, ci_high=high
    )
    return summary


def paired_bootstrap(
    baseline: Sequence[float | None],
    candidate: Sequence[float | None],
    *,
    statistic: Statistic = np.mean,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "percentile",
) -> dict[str, Any]:
    """Paired bootstrap test of two runs scored on the same records (aligned by position).

    ``delta = statistic(candidate) - statistic(baseline)``, its bootstrap CI, and a two-sided p-value
    for "no difference" from the bootstrap distribution shifted to the null,
    ``(1 + #{|delta* - delta| >= |delta|}) / (n_resamples + 1)``. Pairs where either score is missing
    are left out and counted; with no pair left, delta, CI and p are None (e.g. BLEU when every reply of
    a run is empty).
    """
    if len(baseline) != len(candidate):
        raise ValueError(f"paired runs differ in length: {len(baseline)} vs {len(candidate)} records")
    a = np.array([np.nan if v is None else v for v in baseline], dtype=float)
    b = np.array([np.nan if v is None else v for v in candidate], dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size == 0:
        return {"n": 0, "n_missing": int(keep.size), "delta": None, "ci_low": None, "ci_high": None, "p_value": None}

    def difference(x, y, axis=-1):
        return statistic(y, axis=axis) - statistic(x, axis=axis)

    delta = float(difference(a, b))
    low, high, dist = _bootstrap([a, b], difference, n_resamples, confidence, seed, method)
    if dist is None:  # one pair: every resample is that pair
        dist = np.full(n_resamples, delta)
    extreme = int(np.count_nonzero(np.abs(dist - delta) >= abs(delta)))
    return {
        "n": int(a.size),
        "n_missing": int((~keep).sum()),
        "delta": delta,
        "ci_low": low,
        "ci_high": high,
        "p_value": (1 + extreme) / (n_resamples + 1),
    }


def _memberships(labels: Sequence[str | Sequence[str]], grouping: str) -> list[tuple[str, ...]]:
    out = []
    for i, label in enumerate(labels):
        if isinstance(label, str):
            out.append((label,))
        elif isinstance(label, Sequence) and all(isinstance(x, str) for x in label):
            out.append(tuple(label))
        else:
            raise ValueError(f"grouping {grouping!r}, sample {i}: expected a label or a list of labels, got {label!r}")
    return out


def aggregate(
    per_sample: Mapping[str, Sequence[float | None]],
    groupings: Mapping[str, Sequence[str | Sequence[str]]] | None = None,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    method: str = "percentile",
) -> dict[str, Any]:
    """Summaries (see ``summarize``) of every metric overall and per group.

    ``groupings`` maps a grouping name (e.g. "task", "dimension") to one entry per sample: a label, or a
    list of labels when a sample belongs to several groups (or none). Returns
    ``{"overall": {metric: summary}, grouping: {label: {metric: summary}}}``, labels sorted.
    """
    lengths = {name: len(values) for name, values in per_sample.items()}
    lengths.update({f"groupings[{g!r}]": len(labels) for g, labels in (groupings or {}).items()})
    if len(set(lengths.values())) > 1:
        raise ValueError(f"per-sample lists differ in length: {lengths}")

    def summaries(rows: Sequence[int] | None) -> dict[str, Any]:
        return {
            metric: summarize(
                values if rows is None else [values[i] for i in rows],
                n_resamples=n_resamples,
                confidence=confidence,
                seed=seed,
                method=method,
            )
            for metric, values in per_sample.items()
        }

    result: dict[str, Any] = {"overall": summaries(None)}
    for grouping, labels in (groupings or {}).items():
        members: dict[str, list[int]] = {}
        for i, sample_labels in enumerate(_memberships(labels, grouping)):
            for label in dict.fromkeys(sample_labels):
                members.setdefault(label, []).append(i)
        result[grouping] = {label: summaries(rows) for label, rows in sorted(members.items())}
    return result
