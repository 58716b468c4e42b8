"""Sampled CLUB arithmetic on hand-specified log-prob matrices and EMID's sign."""

import math

import pytest
import torch

from rpbench.eval.generalization.emi import club_mi, matrix_scores, negative_pairs, sampled_club_mi


def mi_all(matrix: torch.Tensor) -> float:
    """CLUB MI with every off-diagonal negative (n(n-1) <= 1000)."""
    return sampled_club_mi(matrix_scores(matrix), range(len(matrix)), 1000, 0)


def test_negative_pairs_are_distinct_off_diagonal_and_seeded():
    pairs = negative_pairs(5, 1000, seed=0)
    assert sorted(pairs) == [(i, j) for i in range(5) for j in range(5) if i != j]  # all 20 when fewer than asked
    few = negative_pairs(30, 50, seed=3)
    assert len(set(few)) == 50 and all(i != j and 0 <= i < 30 and 0 <= j < 30 for i, j in few)
    assert few == negative_pairs(30, 50, seed=3) and few != negative_pairs(30, 50, seed=4)
    with pytest.raises(ValueError, match="at least 2"):
        negative_pairs(1, 10, seed=0)
    with pytest.raises(ValueError, match="n_negatives must be positive"):
        negative_pairs(3, 0, seed=0)


def test_club_on_a_known_conditional():
    # Toy world: 3 inputs, each with its own response; the critic gives ℓ = log 0.8 to the matched
    # response and log 0.1 to each other one. All 6 negatives: MI = log 0.8 - log 0.1 = log 8.
    matrix = torch.full((3, 3), math.log(0.1), dtype=torch.float64)
    matrix.fill_diagonal_(math.log(0.8))
    assert mi_all(matrix) == pytest.approx(math.log(8))
    # An uninformative critic (ℓ independent of x) gives 0.
    assert mi_all(torch.full((3, 3), -2.0, dtype=torch.float64)) == pytest.approx(0.0)


def test_sampled_club_mi_averages_exactly_the_negative_pairs_by_hand():
    # ℓ[i, j] = 4i + j: diagonal 0, 5, 10, 15 (mean 7.5); negatives are negative_pairs(4, 5, seed=7)
    matrix = torch.arange(16, dtype=torch.float64).view(4, 4)
    pairs = negative_pairs(4, 5, seed=7)
    assert len(set(pairs)) == 5 and all(i != j for i, j in pairs)
    expected = 7.5 - sum(4 * i + j for i, j in pairs) / 5
    assert sampled_club_mi(matrix_scores(matrix), range(4), 5, seed=7) == pytest.approx(expected, abs=1e-12)
    # on a subset of rows, the pairs index into those rows (positions k -> rows[k])
    rows = [3, 0, 2]
    sub = negative_pairs(3, 4, seed=1)
    expected = sum(matrix[r, r].item() for r in rows) / 3 - sum(matrix[rows[i], rows[j]].item() for i, j in sub) / 4
    assert sampled_club_mi(matrix_scores(matrix), rows, 4, seed=1) == pytest.approx(expected, abs=1e-12)


def test_club_mi_and_matrix_scores_reject_bad_shapes():
    assert club_mi(torch.tensor([1.0, 3.0]), torch.tensor([0.5])) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        club_mi(torch.tensor([1.0]), torch.tensor([]))
    with pytest.raises(ValueError, match="square"):
        matrix_scores(torch.zeros(2, 3))


def test_emid_is_positive_when_the_model_loses_information_under_shift():
    # ID: model responses as informative as golden ones (EMI 0); OOD: model responses generic (MI 0),
    # golden ones MI log 7 -> EMI(OOD) = -log 7 and EMID = EMI(ID) - EMI(OOD) = log 7 > 0.
    informative = torch.full((4, 4), math.log(0.1), dtype=torch.float64).fill_diagonal_(math.log(0.7))
    generic = torch.full((4, 4), -1.5, dtype=torch.float64)
    id_emi = mi_all(informative) - mi_all(informative)
    ood_emi = mi_all(generic) - mi_all(informative)
    assert id_emi == pytest.approx(0.0)
    assert ood_emi == pytest.approx(-math.log(7))
    assert id_emi - ood_emi == pytest.approx(math.log(7))
