"""Bound convergence on nested seeded subsamples, with R-EMID from pair scorers over log-prob matrices."""

import math

import pytest
import torch

from rpbench.eval.benchmarks.rpgbench.report import convergence_figure, plot_convergence
from rpbench.eval.generalization.bound import bound_of
from rpbench.eval.generalization.convergence import bound_convergence, remid_of_subsamples
from rpbench.eval.generalization.emi import matrix_scores, negative_pairs, sampled_club_mi
from rpbench.eval.generalization.severity import SplitEmbeddings, shift_severity


def split(n: int, seed: int, offset: float) -> SplitEmbeddings:
    g = torch.Generator().manual_seed(seed)
    fields = [torch.randn(n, 6, generator=g) + offset * torch.eye(6)[k] for k in range(5)]
    return SplitEmbeddings(*fields)


def informative(n: int, matched: float, other: float) -> torch.Tensor:
    return torch.full((n, n), math.log(other), dtype=torch.float64).fill_diagonal_(math.log(matched))


def test_remid_of_subsamples_on_all_rows_is_emi_id_minus_emi_ood():
    n = 5
    golden = matrix_scores(informative(n, 0.6, 0.1))
    generic = matrix_scores(torch.full((n, n), -1.0, dtype=torch.float64))
    remid = remid_of_subsamples(golden, golden, generic, golden, 1000, 0)
    # ID: model = golden (EMI 0); OOD: a critic that ignores x for model responses (MI 0) -> R-EMID = log 6
    assert remid(range(n), range(n)) == pytest.approx(math.log(6))
    assert remid([0, 2, 4], [1, 3, 4]) == pytest.approx(math.log(6))


def test_remid_of_subsamples_by_hand_with_sampled_negatives():
    # ℓ = 10i + j (ID model), 3i - j (ID golden), i·j (OOD model), i + 2j (OOD golden); 3 negatives each
    ij = torch.arange(4, dtype=torch.float64)
    i, j = ij[:, None], ij[None, :]
    matrices = [10 * i + j, 3 * i - j, i * j, i + 2 * j]
    id_rows, ood_rows = [0, 1, 3], [2, 3, 1]
    negatives = negative_pairs(3, 3, seed=9)

    def mi(m, rows):
        positive = sum(m[r, r].item() for r in rows) / 3
        return positive - sum(m[rows[a], rows[b]].item() for a, b in negatives) / 3

    expected = (mi(matrices[0], id_rows) - mi(matrices[1], id_rows)) - (
        mi(matrices[2], ood_rows) - mi(matrices[3], ood_rows)
    )
    remid = remid_of_subsamples(*map(matrix_scores, matrices), n_negatives=3, seed=9)
    assert remid(id_rows, ood_rows) == pytest.approx(expected, abs=1e-12)
    assert sampled_club_mi(matrix_scores(matrices[0]), id_rows, 3, 9) == pytest.approx(mi(matrices[0], id_rows))


def test_points_use_nested_seeded_subsamples_and_their_own_bound():
    id_split, ood_split = split(12, 0, 0.0), split(10, 1, 2.0)
    seen = []

    def empirical(id_rows, ood_rows):
        seen.append((list(id_rows), list(ood_rows)))
        return float(len(id_rows))

    points = bound_convergence(id_split, ood_split, empirical, [8, 3, 5], 7, 2, None, "sum", "equal")
    assert [(p.repeat, p.n) for p in points] == [(r, n) for r in range(2) for n in (3, 5, 8)]
    for (id_rows, ood_rows), point in zip(seen, points):
        assert len(set(id_rows)) == point.n == len(set(ood_rows))
        severity = shift_severity(id_split.subset(id_rows), ood_split.subset(ood_rows), "equal")
        assert point.bound == bound_of(severity, None, "sum") and point.empirical == point.n
    assert seen[0][0] == seen[2][0][:3] and seen[1][1] == seen[2][1][:5]  # nested within a repeat
    assert seen[0] != seen[3]  # repeats draw new permutations
    again = bound_convergence(id_split, ood_split, lambda a, b: 0.0, [3, 5, 8], 7, 2, None, "sum", "equal")
    assert [p.severity for p in again] == [p.severity for p in points]
    with pytest.raises(ValueError, match=r"2\.\.10"):
        bound_convergence(id_split, ood_split, empirical, [11], 0, 1, None, "sum", "equal")


def test_points_carry_the_entropy_and_delta_form_given():
    id_split, ood_split = split(6, 2, 0.0), split(6, 3, 1.0)
    points = bound_convergence(id_split, ood_split, lambda a, b: 0.0, [4], 0, 1, 2.0, "code", "trace")
    (point,) = points
    assert point.severity.weighting == "trace"
    assert point.bound.entropy == 2.0 and point.bound.delta_form == "code"
    assert point.bound == bound_of(point.severity, 2.0, "code")


def test_the_convergence_figure_has_a_titled_panel_per_category_labelled_axes_and_one_legend(tmp_path):
    """Small multiples, not 2 lines per category in one plot: five categories on a 4-column grid, the mean over
    the repeats drawn, the run named, the bound on the left axis and R-EMID (orders of magnitude smaller) on its
    own right axis, both labelled, ticks at the sample sizes drawn, one legend outside the panels."""
    categories = ["german", "japanese", "Literature", "History", "long"]
    points = {
        c: [{"n": n, "repeat": r, "bound": 2.0 + k + r, "empirical": 0.1 * r} for r in (0, 1) for n in (4, 8)]
        for k, c in enumerate(categories)
    }
    fig = convergence_figure({"empirical": "r_emid", "points": points}, "rpgbench-run")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    twins = [ax for ax in fig.axes if ax not in panels and ax.get_visible()]
    assert [ax.get_title() for ax in panels] == categories and len(twins) == len(categories)
    japanese = panels[1].get_lines() + twins[1].get_lines()
    assert [line.get_label() for line in japanese] == ["Theorem 3.4 bound (left axis)", "R-EMID (right axis)"]
    assert japanese[0].get_ydata().tolist() == [3.5, 3.5] and japanese[1].get_ydata().tolist() == [0.05, 0.05]
    assert (
        fig.get_suptitle() == "rpgbench-run\nbound and R-EMID per shifted category (mean over 2 repeats; band: min-max)"
    )
    assert fig.get_supxlabel() == "samples per split (in-distribution and shifted)"
    assert fig.get_supylabel() == "Theorem 3.4 bound"
    # the shared right axis is labelled in the last column
    assert [twin.get_ylabel() for twin in twins] == ["", "", "", "R-EMID", ""]
    assert panels[0].get_xticks().tolist() == [4, 8]  # the sizes drawn, not 4.5, 5.0, ...
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["Theorem 3.4 bound (left axis)", "R-EMID (right axis)"]
    fig.canvas.draw()
    assert not any(legend.get_window_extent().overlaps(ax.get_window_extent()) for ax in panels)  # over no panel
    # the lowest panel of each column labels its x ticks (the second to fourth columns' are in the first row)
    assert [ax.xaxis.get_tick_params()["labelbottom"] for ax in panels] == [False, True, True, True, True]
    path = plot_convergence({"empirical": "emid_critic_without_r", "points": points}, "r", tmp_path / "b.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
