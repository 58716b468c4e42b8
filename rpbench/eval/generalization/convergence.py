"""The bound and the empirical R-EMID on growing subsamples of an ID and a shifted split.

For each repeat one seeded permutation of each split is drawn and the first n samples of it are
used for every n in ``sizes`` (nested subsamples, so the curve moves only by added samples). The
empirical R-EMID of a subsample comes from a callable; ``remid_of_subsamples`` builds it from pair
scorers that keep what they computed, so a pair is scored once however many subsamples use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rpbench.eval.generalization.bound import Bound, DeltaForm, bound_of
from rpbench.eval.generalization.emi import PairScores, sampled_club_mi
from rpbench.eval.generalization.rjsd import Weighting
from rpbench.eval.generalization.severity import ShiftSeverity, SplitEmbeddings, shift_severity

SubsampleREMID = Callable[[Sequence[int], Sequence[int]], float]


@dataclass(frozen=True)
class ConvergencePoint:
    n: int
    repeat: int
    bound: Bound
    empirical: float  # R-EMID (or EMID) on the same subsample
    severity: ShiftSeverity

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "repeat": self.repeat,
            "bound": self.bound.as_dict(),
            "empirical": self.empirical,
            "severity": self.severity.as_dict(),
        }


def remid_of_subsamples(
    id_model: PairScores,
    id_golden: PairScores,
    ood_model: PairScores,
    ood_golden: PairScores,
    n_negatives: int,
    seed: int,
) -> SubsampleREMID:
    """(ID rows, OOD rows) -> EMI(ID subsample) - EMI(OOD subsample), with scorers ℓ(y_j | x_i [, r_i]) of
    model responses and of golden responses on each split (``scoring.PairScorer``: computed on demand)."""

    def emi(model: PairScores, golden: PairScores, rows: Sequence[int]) -> float:
        return sampled_club_mi(model, rows, n_negatives, seed) - sampled_club_mi(golden, rows, n_negatives, seed)

    return lambda id_rows, ood_rows: emi(id_model, id_golden, id_rows) - emi(ood_model, ood_golden, ood_rows)


def bound_convergence(
    id_split: SplitEmbeddings,
    ood_split: SplitEmbeddings,
    empirical: SubsampleREMID,
    sizes: Sequence[int],
    seed: int,
    repeats: int,
    entropy: float | None,
    delta_form: DeltaForm,
    weighting: Weighting,
) -> list[ConvergencePoint]:
    """Bound (``bound_of``) and ``empirical(id_rows, ood_rows)`` for n ID and n OOD samples, n in ``sizes``."""
    largest = min(len(id_split), len(ood_split))
    bad = [n for n in sizes if not 2 <= n <= largest]
    if bad or not sizes:
        raise ValueError(f"subsample sizes must lie in 2..{largest} (the smaller split), got {list(sizes)}")
    rng = np.random.default_rng(seed)
    points = []
    for repeat in range(repeats):
        id_order, ood_order = rng.permutation(len(id_split)), rng.permutation(len(ood_split))
        for n in sorted(sizes):
            id_rows, ood_rows = id_order[:n].tolist(), ood_order[:n].tolist()
            severity = shift_severity(id_split.subset(id_rows), ood_split.subset(ood_rows), weighting)
            points.append(
                ConvergencePoint(
                    n, repeat, bound_of(severity, entropy, delta_form), empirical(id_rows, ood_rows), severity
                )
            )
    return points
