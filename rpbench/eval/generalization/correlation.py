"""Pearson and Spearman correlations (scipy.stats) between a generalization metric and judge scores.

Inputs are mappings keyed by what was measured (e.g. (model, shift)); the keys must match, so no
pair is dropped silently. Score setting: R-EMI vs WinRate per (model, split). Drop setting: R-EMID
vs WinRate difference per (model, shift), the difference taken as WinRate(ID) - WinRate(shifted) so
that both are positive under degradation (``winrate_drop``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats


@dataclass(frozen=True)
class Correlation:
    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def correlate(metric: Mapping[Hashable, float], judge: Mapping[Hashable, float]) -> Correlation:
    """Correlations of ``metric[k]`` with ``judge[k]`` over their common keys, which must be all keys of both."""
    if set(metric) != set(judge):
        only_metric, only_judge = set(metric) - set(judge), set(judge) - set(metric)
        raise ValueError(
            f"keys differ: only in metric {sorted(map(str, only_metric))}, only in judge {sorted(map(str, only_judge))}"
        )
    if len(metric) < 3:
        raise ValueError(f"a correlation needs at least 3 pairs, got {len(metric)}")
    keys = list(metric)
    x, y = [float(metric[k]) for k in keys], [float(judge[k]) for k in keys]
    pearson, spearman = stats.pearsonr(x, y), stats.spearmanr(x, y)
    return Correlation(
        float(pearson.statistic), float(pearson.pvalue), float(spearman.statistic), float(spearman.pvalue), len(keys)
    )


def winrate_drop(id_winrate: float, shifted_winrate: float) -> float:
    """WinRate(ID) - WinRate(shifted): positive = degradation, the same sign convention as R-EMID."""
    return id_winrate - shifted_winrate
