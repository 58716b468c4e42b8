"""Aggregate statistics over per-sample scores: mean, std, percentile-bootstrap CIs, paired tests.

Values are per-sample scores (metric values, 0/1 judge verdicts). ``None`` or NaN marks a sample that
has no score (e.g. an unparseable judge verdict): it is left out and counted in ``n_missing``.
Results are plain JSON-able dicts; statistics that are undefined (no samples) are ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Statistic = Callable[..., Any]  # f(array, axis=-1) -> array, like np.mean
MAX_RESAMPLE_CELLS = 2**22  # bounds memory of one block of resampled indices


def present(values: Sequence[float | None]) -> np.ndarray:
    """The scores that are present (not None, not NaN) as a float array."""
    array = np.array([np.nan if v is None else v for v in values], dtype=float)
    return array[~np.isnan(array)]


def bootstrap_distribution(
    samples: Sequence[np.ndarray], statistic: Statistic, n_resamples: int, seed: int
) -> np.ndarray:
    """``statistic`` over ``n_resamples`` resamples of equal-length ``samples`` drawn with shared indices.

    Indices come from ``np.random.default_rng(seed).integers(0, n, (n_resamples, n))`` in row blocks,
    the same draws as ``scipy.stats.bootstrap(..., rng=np.random.default_rng(seed))``.
    """
    n = len(samples[0])
    rng = np.random.default_rng(seed)
    block = max(1, MAX_RESAMPLE_CELLS // n)
    out = []
    for start in range(0, n_resamples, block):
        index = rng.integers(0, n, (min(block, n_resamples - start), n))
        out.append(statistic(*(s[index] for s in samples)))
    return np.concatenate(out)


def bootstrap_ci(
    values: Sequence[float],
    statistic: Statistic = np.mean,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic(values)``."""
    sample = np.asarray(values, dtype=float)
    if sample.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    dist = bootstrap_distribution([sample], lambda x: statistic(x, axis=-1), n_resamples, seed)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(dist, [alpha, 1 - alpha])
    return float(low), float(high)


def summarize(
    values: Sequence[float | None], *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
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
    low, high = bootstrap_ci(sample, n_resamples=n_resamples, confidence=confidence, seed=seed)
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
) -> dict[str, Any]:
    """Paired bootstrap test of two runs scored on the same records (aligned by position).

    ``delta = statistic(candidate) - statistic(baseline)``, its percentile CI, and a two-sided p-value
    for "no difference" from the bootstrap distribution shifted to the null,
    ``(1 + #{|delta* - delta| >= |delta|}) / (n_resamples + 1)``. Pairs where either score is missing
    are left out and counted.
    """
    if len(baseline) != len(candidate):
        raise ValueError(f"paired runs differ in length: {len(baseline)} vs {len(candidate)} records")
    a = np.array([np.nan if v is None else v for v in baseline], dtype=float)
    b = np.array([np.nan if v is None else v for v in candidate], dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size == 0:
        raise ValueError("paired_bootstrap: no record has a score in both runs")
    delta = float(statistic(b, axis=-1) - statistic(a, axis=-1))
    dist = bootstrap_distribution([a, b], lambda x, y: statistic(y, axis=-1) - statistic(x, axis=-1), n_resamples, seed)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(dist, [alpha, 1 - alpha])
    extreme = int(np.count_nonzero(np.abs(dist - delta) >= abs(delta)))
    return {
        "n": int(a.size),
        "n_missing": int((~keep).sum()),
        "delta": delta,
        "ci_low": float(low),
        "ci_high": float(high),
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
