"""Krippendorff's alpha: how far several coders (here: judges) agree on the values they give to the same units,
beyond what chance would give; missing values allowed.

``ratings`` is one row per coder, one column per unit, ``None`` (or NaN) where a coder gave no value. Only units
with two values or more are pairable; each contributes its value pairs to the coincidence matrix with weight
1 / (values in the unit - 1). With ``n`` pairable values, ``n_c`` of them equal to ``c``, ``o_ck`` the
coincidences and ``delta`` the level's difference function:

    alpha = 1 - (n - 1) * sum_ck o_ck delta_ck / sum_ck n_c n_k delta_ck

``delta`` by level: nominal 0 / 1 (equal or not); interval (c - k)^2; ordinal (sum of n_g for the ranks g from
c to k, less (n_c + n_k) / 2)^2. Alpha is None (undefined) when no unit is pairable or every pairable value is
the same (no expected disagreement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LEVELS = ("nominal", "ordinal", "interval")


def _present(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def coincidences(ratings: Sequence[Sequence[float | None]]) -> tuple[list[float], np.ndarray]:
    """The distinct pairable values (sorted) and the coincidence matrix over them."""
    if len({len(row) for row in ratings}) > 1:
        raise ValueError("ratings: every coder's row needs one entry per unit (None where missing)")
    units = [[row[u] for row in ratings if _present(row[u])] for u in range(len(ratings[0]) if ratings else 0)]
    units = [values for values in units if len(values) >= 2]
    values = sorted({v for unit in units for v in unit})
    index = {v: i for i, v in enumerate(values)}
    matrix = np.zeros((len(values), len(values)))
    for unit in units:
        counts = np.zeros(len(values))
        for v in unit:
            counts[index[v]] += 1
        matrix += (np.outer(counts, counts) - np.diag(counts)) / (len(unit) - 1)
    return values, matrix


def differences(values: Sequence[float], totals: np.ndarray, level: str) -> np.ndarray:
    """``delta_ck`` for every pair of ``values`` (``totals``: n_c, for the ordinal level)."""
    if level == "nominal":
        return 1.0 - np.eye(len(values))
    if level == "interval":
        v = np.asarray(values, dtype=float)
        return (v[:, None] - v[None, :]) ** 2
    if level == "ordinal":
        cumulative = np.concatenate([[0.0], np.cumsum(totals)])
        low = np.minimum.outer(np.arange(len(values)), np.arange(len(values)))
        high = np.maximum.outer(np.arange(len(values)), np.arange(len(values)))
        between = cumulative[high + 1] - cumulative[low]
        return (between - (totals[:, None] + totals[None, :]) / 2) ** 2
    raise ValueError(f"level: one of {', '.join(LEVELS)}, got {level!r}")


def alpha(ratings: Sequence[Sequence[float | None]], level: str = "interval") -> float | None:
    """Krippendorff's alpha of ``ratings`` (coders x units, None where missing) at ``level`` (module docstring)."""
    if level not in LEVELS:
        raise ValueError(f"level: one of {', '.join(LEVELS)}, got {level!r}")
    values, matrix = coincidences(ratings)
    totals = matrix.sum(axis=1)
    n = totals.sum()
    delta = differences(values, totals, level)
    expected = float((np.outer(totals, totals) * delta).sum())
    if n < 2 or expected == 0:
        return None
    return 1.0 - (n - 1) * float((matrix * delta).sum()) / expected
