"""Bound convergence on nested seeded subsamples, with R-EMID from full pair log-prob matrices."""

import math

import pytest
import torch

from rpbench.eval.generalization.bound import bound_of
from rpbench.eval.generalization.convergence import bound_convergence, remid_from_matrices
from rpbench.eval.generalization.emi import club_mi_matrix
from rpbench.eval.generalization.shift import SplitEmbeddings, shift_severity


def split(n: int, seed: int, offset: float) -> SplitEmbeddings:
    g = torch.Generator().manual_seed(seed)
    fields = [torch.randn(n, 6, generator=g) + offset * torch.eye(6)[k] for k in range(5)]
    return SplitEmbeddings(*fields)


def informative(n: int, matched: float, other: float) -> torch.Tensor:
    return torch.full((n, n), math.log(other), dtype=torch.float64).fill_diagonal_(math.log(matched))


def test_remid_from_matrices_on_all_rows_is_emi_id_minus_emi_ood():
    n = 5
    golden = informative(n, 0.6, 0.1)
    remid = remid_from_matrices(golden, golden, torch.full((n, n), -1.0, dtype=torch.float64), golden, 1000, 0)
    # ID: model = golden (EMI 0); OOD: a critic that ignores x for model responses (MI 0) -> R-EMID = log 6
    assert remid(range(n), range(n)) == pytest.approx(math.log(6))
    assert remid([0, 2, 4], [1, 3, 4]) == pytest.approx(math.log(6))
    expected = club_mi_matrix(golden[:3, :3], 1000, 0)
    assert expected == pytest.approx(math.log(6))


def test_points_use_nested_seeded_subsamples_and_their_own_bound():
    id_split, ood_split = split(12, 0, 0.0), split(10, 1, 2.0)
    seen = []

    def empirical(id_rows, ood_rows):
        seen.append((list(id_rows), list(ood_rows)))
        return float(len(id_rows))

    points = bound_convergence(id_split, ood_split, empirical, sizes=[8, 3, 5], seed=7, repeats=2)
    assert [(p.repeat, p.n) for p in points] == [(r, n) for r in range(2) for n in (3, 5, 8)]
    for (id_rows, ood_rows), point in zip(seen, points):
        assert len(set(id_rows)) == point.n == len(set(ood_rows))
        severity = shift_severity(id_split.subset(id_rows), ood_split.subset(ood_rows))
        assert point.bound == bound_of(severity) and point.empirical == point.n
    assert seen[0][0] == seen[2][0][:3] and seen[1][1] == seen[2][1][:5]  # nested within a repeat
    assert seen[0] != seen[3]  # repeats draw new permutations
    again = bound_convergence(id_split, ood_split, lambda a, b: 0.0, sizes=[3, 5, 8], seed=7, repeats=2)
    assert [p.severity for p in again] == [p.severity for p in points]
    with pytest.raises(ValueError, match=r"2\.\.10"):
        bound_convergence(id_split, ood_split, empirical, sizes=[11], seed=0)
