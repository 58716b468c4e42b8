"""Variance components of a balanced crossed random-effects design: a two-factor case worked by hand, exact
unbiasedness on a four-factor design (the expectation of each quadratic-form estimate computed from the model's
covariance), recovery of known components by simulation, truncation, the sample-size formula, the bootstrap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rpbench.scoring.variance_components import (
    bootstrap_variances,
    crossed_components,
    mean_variance,
    smallest_count,
    subsets,
)


def test_a_two_factor_design_matches_the_mean_squares_worked_by_hand():
    y = np.array([[2.0, 4.0], [3.0, 3.0], [5.0, 7.0]])  # 3 scenarios x 2 judges
    # grand mean 4; scenario means 3, 3, 6; judge means 10/3, 14/3
    # SS_scenario = 2 * (1 + 1 + 4) = 12, df 2, MS 6
    # SS_judge = 3 * ((10/3 - 4)^2 + (14/3 - 4)^2) = 3 * 8/9 = 8/3, df 1, MS 8/3
    # residuals y - row - col + 4: -1/3, 1/3, 2/3, -2/3, -1/3, 1/3: SS 12/9 = 4/3, df 2, MS 2/3
    # (12 + 8/3 + 4/3 = 16 = the total sum of squares about the mean)
    # sigma2_residual = 2/3; sigma2_scenario = (6 - 2/3) / 2 = 8/3; sigma2_judge = (8/3 - 2/3) / 3 = 2/3
    terms = {t.factors: t for t in crossed_components(y, ["scenario", "judge"])}
    assert list(terms) == [("scenario",), ("judge",), ("scenario", "judge")]
    assert [terms[k].df for k in terms] == [2, 1, 2]
    assert [terms[k].mean_square for k in terms] == pytest.approx([6, 8 / 3, 2 / 3])
    assert [terms[k].estimate for k in terms] == pytest.approx([8 / 3, 2 / 3, 2 / 3])


def test_a_negative_estimate_is_kept_and_its_variance_truncated_at_zero():
    y = np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 3.0]])
    # judge means 2, 2: MS_judge 0; residuals -1/2, 1/2, 1/2, -1/2, 0, 0: MS_residual 1/2
    # sigma2_judge = (0 - 1/2) / 3 = -1/6; scenario means 1.5, 1.5, 3: MS 3/2, sigma2 = (3/2 - 1/2) / 2 = 1/2
    terms = {t.factors: t for t in crossed_components(y, ["scenario", "judge"])}
    assert terms[("judge",)].estimate == pytest.approx(-1 / 6) and terms[("judge",)].variance == 0.0
    assert terms[("scenario",)].variance == pytest.approx(1 / 2)


SHAPE = (4, 2, 3, 2)  # scenario, policy, simulator, judge: unequal level counts
FACTORS = ["scenario", "policy", "simulator", "judge"]


def model_covariance(shape, sigma2):
    """cov(y_a, y_b) = sum of sigma2_C over the terms C on whose factors cells a and b agree (the model's
    definition, built from the cells' indices)."""
    cells = np.array(list(itertools.product(*(range(n) for n in shape))))
    cov = np.zeros((len(cells), len(cells)))
    for axes, value in sigma2.items():
        same = np.all(cells[:, None, list(axes)] == cells[None, :, list(axes)], axis=-1)
        cov += value * same
    return cov


def test_every_estimate_is_exactly_unbiased_on_a_four_factor_design():
    """An estimate is a quadratic form q(y) = y'Qy unchanged by the mean; for y ~ N(mu, LL'), E[q(y)] =
    trace(L'QL) = sum over the columns l_i of L of q(l_i): the expectation, exactly, from the covariance."""
    terms = subsets(len(SHAPE))
    sigma2 = {axes: 0.1 + 0.3 * i for i, axes in enumerate(terms)}  # 15 distinct, known components
    root = np.linalg.cholesky(model_covariance(SHAPE, sigma2))
    expected = np.zeros(len(terms))
    for column in root.T:
        expected += [t.estimate for t in crossed_components(column.reshape(SHAPE), FACTORS)]
    assert expected == pytest.approx([sigma2[a] for a in terms], rel=1e-9)


def test_known_components_are_recovered_from_simulated_designs():
    """Effects drawn from known components (a seeded generator): the mean estimate over 200 designs lands
    within 15% of each component (its Monte Carlo error is under 5%), and the 15 terms come out by name."""
    rng = np.random.default_rng(7)
    shape, terms = (20, 4, 4, 3), subsets(4)
    sigma2 = {axes: [0.5, 0.2, 0.3, 0.4][axes[0]] if len(axes) == 1 else 0.1 * len(axes) for axes in terms}
    sums = np.zeros(len(terms))
    for _ in range(200):
        y = np.full(shape, 3.0)
        for axes, value in sigma2.items():
            size = [shape[a] if a in axes else 1 for a in range(4)]
            y = y + rng.normal(0, np.sqrt(value), size)
        found = crossed_components(y, FACTORS)
        sums += [t.estimate for t in found]
    assert [t.name for t in found][:5] == ["scenario", "policy", "simulator", "judge", "scenario x policy"]
    assert found[-1].name == "scenario x policy x simulator x judge"
    assert sums / 200 == pytest.approx([sigma2[a] for a in terms], rel=0.15)


def test_the_fewest_levels_for_a_target_variance_solve_the_formula_and_match_a_search():
    variances = {("scenario",): 0.5, ("judge",): 0.2, ("scenario", "judge"): 1.0}
    # with 2 judges: var(mean) = 0.5/n + 0.2/2 + 1.0/(2n) = 0.1 + 1/n; at most 0.15 from n = 1/0.05 = 20
    counts = {"scenario": 1, "judge": 2}
    assert mean_variance(variances, {"scenario": 20, "judge": 2}) == pytest.approx(0.15)
    assert smallest_count(variances, counts, "scenario", 0.15) == 20
    assert smallest_count(variances, counts, "scenario", 0.1) is None  # the judge's 0.1 is a floor
    for target in (0.5, 0.2, 0.13, 0.1001):
        found = smallest_count(variances, counts, "scenario", target)
        search = next(n for n in range(1, 100_000) if mean_variance(variances, {**counts, "scenario": n}) <= target)
        assert found == search
    # judges instead, with 10 scenarios: 0.05 + 0.2/j + 0.1/j = 0.05 + 0.3/j <= 0.1 from j = 6
    assert smallest_count(variances, {"scenario": 10, "judge": 1}, "judge", 0.1) == 6


def test_the_bootstrap_of_identical_scenarios_is_the_estimate_itself():
    one = np.array([[1.0, 4.0, 5.0], [3.0, 4.0, 6.0]])  # policy x judge of one scenario
    y = np.stack([one] * 5)  # five identical scenarios: every resample is the same design
    point = [t.variance for t in crossed_components(y, ["scenario", "policy", "judge"])]
    resampled = bootstrap_variances(y, ["scenario", "policy", "judge"], 0, 30, seed=1)
    assert resampled.shape == (30, 7) and np.allclose(resampled, point)
    assert point[1] > 0 and point[2] > 0  # the policy and judge components are there


def test_a_factor_with_one_level_or_a_missing_score_is_refused():
    with pytest.raises(ValueError, match="judge has 1"):
        crossed_components(np.ones((3, 1)), ["scenario", "judge"])
    with pytest.raises(ValueError, match="missing"):
        crossed_components(np.array([[1.0, np.nan], [2.0, 3.0]]), ["scenario", "judge"])
