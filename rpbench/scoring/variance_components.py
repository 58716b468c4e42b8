"""Variance components of a balanced, fully crossed random-effects design (ANOVA / expected-mean-squares estimators).

The model for a score ``y`` with one observation per cell of factors ``F`` (e.g. scenario, policy seed,
simulator seed, judge), every factor random:

    y = mu + sum over every non-empty subset C of F of effect_C,    effect_C ~ N(0, sigma2_C), independent,

where ``effect_C`` is indexed by the levels of the factors in ``C`` (main effects, then every interaction). With one
observation per cell the interaction of all factors is confounded with measurement error: its component is the
residual.

The sum of squares of term ``A`` is that of its effect estimates (the inclusion-exclusion of marginal means over
``A``'s subsets), with ``prod_{f in A} (n_f - 1)`` degrees of freedom. In a balanced design

    E[MS_A] = sum over C containing A of sigma2_C * prod_{f not in C} n_f,

which is solved from the largest terms down: an unbiased estimate of every component (it may be negative).
The variance reported is that estimate truncated at 0 (the estimate is kept beside it).

The variance of the mean of a design with ``n'_f`` levels of each factor is ``sum_C sigma2_C / prod_{f in C} n'_f``
(every factor random: the absolute error variance of generalizability theory).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Term:
    """One variance component: its factors, degrees of freedom, mean square and EMS estimate."""

    factors: tuple[str, ...]
    df: int
    mean_square: float
    estimate: float  # unbiased, may be negative

    @property
    def variance(self) -> float:
        """The estimate truncated at 0."""
        return max(self.estimate, 0.0)

    @property
    def name(self) -> str:
        return " x ".join(self.factors)


def subsets(n: int) -> list[tuple[int, ...]]:
    """Every non-empty subset of ``range(n)``, smallest first, then in axis order."""
    return [c for size in range(1, n + 1) for c in itertools.combinations(range(n), size)]


def effect(y: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The estimated effect of the term over ``axes``, broadcast to ``y``'s shape: the alternating sum of the
    means over the other axes of each subset of ``axes``."""
    total = np.zeros(y.shape)
    for size in range(len(axes) + 1):
        for kept in itertools.combinations(axes, size):
            others = tuple(a for a in range(y.ndim) if a not in kept)
            total = total + (-1) ** (len(axes) - size) * y.mean(axis=others, keepdims=True)
    return total


def crossed_components(y: np.ndarray, factors: Sequence[str]) -> list[Term]:
    """Every term's component of the balanced crossed design ``y`` (one axis per factor, one score per cell), in
    ``subsets`` order (the last is the residual). Every factor needs 2 or more levels."""
    y = np.asarray(y, dtype=float)
    if y.ndim != len(factors):
        raise ValueError(f"scores have {y.ndim} axes, factors named {len(factors)}: {list(factors)}")
    if few := [f for f, n in zip(factors, y.shape) if n < 2]:
        raise ValueError(f"every factor needs 2 or more levels: {', '.join(few)} has 1")
    if not np.isfinite(y).all():
        raise ValueError("scores hold a missing or infinite value: the design must be complete")
    terms = subsets(y.ndim)
    mean_squares, dfs = {}, {}
    for axes in terms:
        dfs[axes] = int(np.prod([y.shape[a] - 1 for a in axes]))
        mean_squares[axes] = float((effect(y, axes) ** 2).sum()) / dfs[axes]
    estimates: dict[tuple[int, ...], float] = {}
    for axes in reversed(terms):  # supersets first
        above = sum(
            estimates[c] * cells_outside(y.shape, c) for c in terms if set(axes) < set(c)
        )  # the larger terms in E[MS_axes]
        estimates[axes] = (mean_squares[axes] - above) / cells_outside(y.shape, axes)
    return [Term(tuple(factors[a] for a in axes), dfs[axes], mean_squares[axes], estimates[axes]) for axes in terms]


def cells_outside(shape: Sequence[int], axes: tuple[int, ...]) -> int:
    """The levels of the factors not in ``axes``, multiplied: the coefficient of a component in E[MS]."""
    return int(np.prod([n for a, n in enumerate(shape) if a not in axes]))


def mean_variance(variances: Mapping[tuple[str, ...], float], counts: Mapping[str, int]) -> float:
    """The variance of the mean score of a crossed design with ``counts[f]`` levels of each factor f."""
    return sum(v / np.prod([counts[f] for f in factors]) for factors, v in variances.items())


def smallest_count(
    variances: Mapping[tuple[str, ...], float], counts: Mapping[str, int], factor: str, target: float
) -> int | None:
    """The fewest levels of ``factor`` (the others at ``counts``) whose mean has a variance of at most ``target``:
    ``ceil(B / (target - A))`` with A the components without ``factor`` and B those with it (divided by the other
    factors' counts); None when A alone reaches ``target`` (no number of levels is enough)."""
    others = {f: n for f, n in counts.items() if f != factor}
    fixed = mean_variance({c: v for c, v in variances.items() if factor not in c}, others)
    scaled = mean_variance({tuple(f for f in c if f != factor): v for c, v in variances.items() if factor in c}, others)
    if fixed >= target:
        return None
    target *= 1 + 1e-9  # a bound met exactly is met despite rounding
    n = max(1, int(np.ceil(scaled / (target - fixed))))
    while n > 1 and fixed + scaled / (n - 1) <= target:  # the ceiling of a rounded quotient may be one too many
        n -= 1
    return n


def bootstrap_variances(y: np.ndarray, factors: Sequence[str], axis: int, n_resamples: int, seed: int) -> np.ndarray:
    """The truncated components (one column per term, ``subsets`` order) of ``n_resamples`` designs whose levels
    along ``axis`` are drawn with replacement (the other factors' levels kept): rows of resamples."""
    rng = np.random.default_rng(seed)
    n = y.shape[axis]
    out = np.empty((n_resamples, len(subsets(y.ndim))))
    for i in range(n_resamples):
        drawn = np.take(y, rng.integers(0, n, n), axis=axis)
        out[i] = [t.variance for t in crossed_components(drawn, factors)]
    return out
