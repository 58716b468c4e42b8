"""Representation JSD on synthetic embeddings, against hand-computed eigenvalues."""

import math

import pytest
import torch

from rpbench.eval.generalization.rjsd import (
    MAX_JSD,
    representation_jsd,
    row_entropy,
    second_moment,
    unit_rows,
    von_neumann_entropy,
)


def binary_entropy(p: float) -> float:
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def cloud(center: torch.Tensor, n: int, spread: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return center + spread * torch.randn(n, center.numel(), generator=g)


def test_second_moment_is_uncentered_unscaled_on_unit_rows():
    z = torch.tensor([[3.0, 4.0], [0.0, 2.0]])  # rows normalise to (0.6, 0.8) and (0, 1)
    expected = torch.tensor([[0.36, 0.48], [0.48, 0.64 + 1.0]], dtype=torch.float64)
    assert torch.allclose(second_moment(z), expected)
    assert second_moment(z).trace().item() == pytest.approx(2.0)


def test_entropy_of_trace_normalised_positive_eigenvalues():
    # diag(3, 1, 0): eigenvalues 3/4, 1/4 after normalisation; the zero eigenvalue is left out
    c = torch.diag(torch.tensor([3.0, 1.0, 0.0]))
    assert von_neumann_entropy(c) == pytest.approx(binary_entropy(0.75), abs=1e-12)


def test_hand_computed_two_dimensional_example():
    # P = {(1, 0)}, Q = {(cos 60°, sin 60°)}: H(C_P) = H(C_Q) = 0 and the mixture (uuᵀ + vvᵀ)/2 has
    # trace-normalised eigenvalues (1 ± cos 60°)/2 = 3/4, 1/4.
    p = torch.tensor([[1.0, 0.0]])
    q = torch.tensor([[math.cos(math.pi / 3), math.sin(math.pi / 3)]], dtype=torch.float64)
    assert representation_jsd(p, q, "trace") == pytest.approx(binary_entropy(0.75), abs=1e-12)
    orthogonal = representation_jsd(p, torch.tensor([[0.0, 5.0]]), "trace")  # scaled rows are normalised
    assert orthogonal == pytest.approx(math.log(2), abs=1e-12)


def test_unequal_sizes_weight_the_mixture_by_set_size():
    # P = {e1, e2} (H = ln 2), Q = {e1} (H = 0): the mixture diag(2, 1)/3 is the pooled sample's
    p = torch.eye(2)
    q = torch.tensor([[1.0, 0.0]])
    expected = binary_entropy(2 / 3) - math.log(2) / 2
    assert representation_jsd(p, q, "trace") == pytest.approx(expected, abs=1e-12)
    # equal weighting: mixture diag(3/4, 1/4)
    assert representation_jsd(p, q, weighting="equal") == pytest.approx(
        binary_entropy(0.75) - math.log(2) / 2, abs=1e-12
    )
    # a large low-entropy set against a small high-entropy one goes negative under the authors' weighting
    big_one_direction = torch.tensor([[1.0, 0.0]]).repeat(100, 1)
    assert representation_jsd(big_one_direction, p, "trace") < -0.2
    assert representation_jsd(big_one_direction, p, weighting="equal") > 0


def test_identity_symmetry_range_and_separation():
    d = 8
    center_a = torch.zeros(d)
    center_a[0] = 1.0
    a = cloud(center_a, 40, 0.3, seed=0)
    a_again = cloud(center_a, 40, 0.3, seed=1)
    assert representation_jsd(a, a, "trace") == pytest.approx(0.0, abs=1e-10)
    values = []
    for angle in (0.2, 0.8, 1.5):
        center_b = torch.zeros(d)
        center_b[0], center_b[1] = math.cos(angle), math.sin(angle)
        b = cloud(center_b, 40, 0.3, seed=2)
        forward, backward = representation_jsd(a, b, "trace"), representation_jsd(b, a, "trace")
        assert forward == pytest.approx(backward, abs=1e-12)
        assert 0.0 <= forward <= MAX_JSD
        values.append(forward)
    assert values == sorted(values) and values[0] < values[-1] / 3  # more separated -> larger
    assert representation_jsd(a, a_again, "trace") < values[0]  # same distribution, other draw: smallest


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="row 1 is all zeros"):
        representation_jsd(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.eye(2), "trace")
    with pytest.raises(ValueError, match="widths differ"):
        representation_jsd(torch.eye(2), torch.eye(3), "trace")
    with pytest.raises(ValueError, match="not finite"):
        representation_jsd(torch.tensor([[float("nan"), 1.0]]), torch.eye(2), "trace")
    with pytest.raises(ValueError, match="weighting"):
        representation_jsd(torch.eye(2), torch.eye(2), weighting="pooled")


def second_moment_jsd(p: torch.Tensor, q: torch.Tensor, weighting: str) -> float:
    """Peer: the EMID code's formula on the [d, d] second-moment matrices themselves."""
    c_p, c_q = second_moment(p), second_moment(q)
    if weighting == "equal":
        c_p, c_q = c_p / c_p.trace(), c_q / c_q.trace()
    return von_neumann_entropy((c_p + c_q) / 2) - (von_neumann_entropy(c_p) + von_neumann_entropy(c_q)) / 2


@pytest.mark.parametrize("weighting", ["trace", "equal"])
@pytest.mark.parametrize("n_p, n_q, d", [(3, 5, 16), (30, 40, 6), (4, 20, 8)])
def test_gram_matrix_entropies_equal_the_second_moment_formula(weighting, n_p, n_q, d):
    # fewer samples than dimensions: the entropies come from the [n, n] Gram matrices; more: from [d, d]
    center = torch.zeros(d)
    center[0] = 1.0
    p, q = cloud(center, n_p, 0.5, seed=n_p), cloud(-center, n_q, 0.5, seed=n_q)
    expected = second_moment_jsd(p, q, weighting)
    assert representation_jsd(p, q, weighting) == pytest.approx(expected, abs=1e-10)
    assert row_entropy(unit_rows(p)) == pytest.approx(von_neumann_entropy(second_moment(p)), abs=1e-10)
