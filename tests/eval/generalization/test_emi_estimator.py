"""Sampled CLUB arithmetic on hand-specified log-prob matrices and EMID's sign."""

import math

import pytest
import torch

from rpbench.eval.generalization.emi import club_mi_matrix, emi_of, emid, negative_pairs


def test_negative_pairs_are_distinct_off_diagonal_and_seeded():
    pairs = negative_pairs(5, 1000, seed=0)
    assert sorted(pairs) == [(i, j) for i in range(5) for j in range(5) if i != j]  # all 20 when fewer than asked
    few = negative_pairs(30, 50, seed=3)
    assert len(set(few)) == 50 and all(i != j and 0 <= i < 30 and 0 <= j < 30 for i, j in few)
    assert few == negative_pairs(30, 50, seed=3) and few != negative_pairs(30, 50, seed=4)
    with pytest.raises(ValueError, match="at least 2"):
        negative_pairs(1, 10, seed=0)


def test_club_on_a_known_conditional():
    # Toy world: 3 inputs, each with its own response; the critic gives ℓ = log 0.8 to the matched
    # response and log 0.1 to each other one. All 6 negatives: MI = log 0.8 - log 0.1 = log 8.
    matrix = torch.full((3, 3), math.log(0.1))
    matrix.fill_diagonal_(math.log(0.8))
    assert club_mi_matrix(matrix, n_negatives=1000, seed=0) == pytest.approx(math.log(8))
    # An uninformative critic (ℓ independent of x) gives 0.
    assert club_mi_matrix(torch.full((3, 3), -2.0), 1000, 0) == pytest.approx(0.0)


def test_club_with_sampled_negatives_averages_exactly_those_pairs():
    matrix = torch.arange(16, dtype=torch.float64).view(4, 4)
    pairs = negative_pairs(4, 5, seed=7)
    expected = matrix.diagonal().mean() - sum(matrix[i, j] for i, j in pairs) / 5
    assert club_mi_matrix(matrix, 5, seed=7) == pytest.approx(float(expected))


def test_emid_is_positive_when_the_model_loses_information_under_shift():
    # ID: model responses as informative as golden ones (EMI 0); OOD: model responses generic (MI 0).
    informative = torch.full((4, 4), math.log(0.1)).fill_diagonal_(math.log(0.7))
    generic = torch.full((4, 4), -1.5)
    mi = lambda m: club_mi_matrix(m, 1000, 0)
    id_emi = emi_of(mi(informative), mi(informative), 4, 12, reasoning=True)
    ood_emi = emi_of(mi(generic), mi(informative), 4, 12, reasoning=True)
    assert id_emi.emi == pytest.approx(0.0)
    assert ood_emi.emi == pytest.approx(-math.log(7))
    assert emid(id_emi, ood_emi) == pytest.approx(math.log(7)) and emid(id_emi, ood_emi) > 0
    with pytest.raises(ValueError, match="reasoning"):
        emid(id_emi, emi_of(0.0, 0.0, 4, 12, reasoning=False))
