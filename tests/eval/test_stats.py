"""Aggregate statistics against hand-computed cases and scipy.stats.bootstrap on the same draws."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rpbench.eval.stats import aggregate, bootstrap_ci, paired_bootstrap, summarize

scipy_stats = pytest.importorskip("scipy.stats")


def test_summary_by_hand():
    s = summarize([1.0, 2.0, None, 3.0, float("nan"), 4.0])
    assert (s["n"], s["n_missing"]) == (4, 2)
    assert s["mean"] == 2.5
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))  # sample std, ddof 1
    assert 1.0 <= s["ci_low"] < 2.5 < s["ci_high"] <= 4.0
    assert summarize([None]) == {"n": 0, "n_missing": 1, "mean": None, "std": None, "ci_low": None, "ci_high": None}


def test_bootstrap_ci_small_cases_by_hand():
    assert bootstrap_ci([0.7] * 5) == (0.7, 0.7)
    # two values: resample means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4 -> 2.5% and 97.5% quantiles 0 and 1
    assert bootstrap_ci([0.0, 1.0], n_resamples=4000) == (0.0, 1.0)
    # the 40% interval (30% and 70% quantiles) lies inside the probability-1/2 mass at 0.5
    low, high = bootstrap_ci([0.0, 1.0], n_resamples=4000, confidence=0.4)
    assert (low, high) == (0.5, 0.5)


@pytest.mark.parametrize("statistic", [np.mean, np.median])
def test_bootstrap_ci_equals_scipy(statistic):
    x = np.random.default_rng(5).normal(size=40)
    ours = bootstrap_ci(x, statistic, n_resamples=3000, confidence=0.9, seed=3)
    ref = scipy_stats.bootstrap(
        (x,), statistic, method="percentile", n_resamples=3000, confidence_level=0.9, rng=np.random.default_rng(3)
    ).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_bootstrap_in_blocks_draws_the_same(monkeypatch):
    from rpbench.eval import stats

    x = np.random.default_rng(1).random(50)
    whole = bootstrap_ci(x, n_resamples=500, seed=7)
    monkeypatch.setattr(stats, "MAX_RESAMPLE_CELLS", 50 * 7)  # blocks of 7 resamples
    assert bootstrap_ci(x, n_resamples=500, seed=7) == whole


def test_paired_bootstrap_by_hand():
    a = [0.2, 0.5, 0.9, 0.4]
    same = paired_bootstrap(a, a)
    assert (same["delta"], same["ci_low"], same["ci_high"], same["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    shifted = paired_bootstrap(a, [v + 0.25 for v in a], n_resamples=999)
    assert shifted["delta"] == pytest.approx(0.25)
    assert (shifted["ci_low"], shifted["ci_high"]) == pytest.approx((0.25, 0.25))
    assert shifted["p_value"] == 1 / 1000  # no resample is as far from the observed delta as 0
    # delta* = k/4 with k ~ Binomial(4, 1/4); p = P(|k/4 - 1/4| >= 1/4) = P(k = 0) + P(k >= 2)
    one = paired_bootstrap([0, 0, 0, 0], [1, 0, 0, 0], n_resamples=20000)
    p_k = [math.comb(4, k) * 0.25**k * 0.75 ** (4 - k) for k in range(5)]
    assert one["p_value"] == pytest.approx(p_k[0] + sum(p_k[2:]), abs=0.015)


def test_paired_bootstrap_ci_equals_scipy_and_skips_missing():
    rng = np.random.default_rng(6)
    a = rng.normal(size=30)
    b = a + 0.3 + rng.normal(size=30) * 0.5
    ours = paired_bootstrap(list(a) + [None], list(b) + [1.0], n_resamples=2000, seed=4)
    ref = scipy_stats.bootstrap(
        (a, b),
        lambda x, y, axis: y.mean(axis) - x.mean(axis),
        paired=True,
        method="percentile",
        n_resamples=2000,
        rng=np.random.default_rng(4),
    )
    assert (ours["ci_low"], ours["ci_high"]) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    assert (ours["n"], ours["n_missing"]) == (30, 1)
    assert ours["delta"] == pytest.approx(b.mean() - a.mean())
    assert ours["p_value"] < 0.01
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([1, 2], [1])


def test_aggregate_per_task_dimension_and_overall():
    per_sample = {"rouge1": [0.1, 0.2, 0.3, 0.4, 0.5], "judge": [1, 0, None, 1, 1]}
    groupings = {"task": ["a", "b", "a", "b", "a"], "dimension": [["x", "y"], ["y"], [], "x", ["x", "x"]]}
    result = aggregate(per_sample, groupings, n_resamples=200)
    assert set(result) == {"overall", "task", "dimension"}
    assert result["overall"]["rouge1"]["mean"] == pytest.approx(0.3)
    assert (result["overall"]["judge"]["n"], result["overall"]["judge"]["n_missing"]) == (4, 1)
    assert result["task"]["a"]["rouge1"]["mean"] == pytest.approx(0.3)  # samples 0, 2, 4
    assert result["task"]["a"]["judge"]["mean"] == 1.0 and result["task"]["a"]["judge"]["n_missing"] == 1
    assert result["task"]["b"]["rouge1"]["mean"] == pytest.approx(0.3)  # samples 1, 3
    assert result["dimension"]["x"]["rouge1"]["n"] == 3  # samples 0, 3, 4 (4 listed twice counts once)
    assert result["dimension"]["x"]["rouge1"]["mean"] == pytest.approx((0.1 + 0.4 + 0.5) / 3)
    assert result["dimension"]["y"]["judge"]["mean"] == 0.5
    assert list(result["dimension"]) == ["x", "y"]
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_aggregate_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match="differ in length"):
        aggregate({"m": [1, 2]}, {"task": ["a"]})
    with pytest.raises(ValueError, match="grouping 'dimension', sample 1"):
        aggregate({"m": [1, 2]}, {"dimension": [["x"], 3]})


def test_same_values_as_the_hand_written_bootstrap_it_replaced():
    # computed once with rpbench/eval/stats.py before it used scipy.stats.bootstrap (same seeds, same draws)
    s = summarize([0.1, 0.4, None, 0.35, 0.8, 0.65, 0.2, 0.9, 0.55], n_resamples=2000, seed=11)
    assert s == pytest.approx(
        {"n": 8, "n_missing": 1, "mean": 0.49375, "std": 0.2821315549273323, "ci_low": 0.3125, "ci_high": 0.675}
    )
    a, b = [0.2, 0.5, 0.9, 0.4, 0.3, 0.7, None, 0.6], [0.3, 0.6, 0.8, 0.6, 0.5, 0.7, 0.9, 0.75]
    assert paired_bootstrap(a, b, n_resamples=2000, seed=5) == pytest.approx(
        {
            "n": 7,
            "n_missing": 1,
            "delta": 0.09285714285714275,
            "ci_low": 0.014285714285714235,
            "ci_high": 0.1642857142857143,
            "p_value": 0.015992003998001,
        }
    )


def test_bca_intervals_equal_scipy_paired_and_unpaired():
    rng = np.random.default_rng(8)
    a = rng.exponential(size=25)  # skewed: BCa and percentile differ
    b = a + rng.normal(0.2, 0.3, size=25)
    ours = bootstrap_ci(a, n_resamples=1500, seed=2, method="BCa")
    ref = scipy_stats.bootstrap((a,), np.mean, method="BCa", n_resamples=1500, rng=np.random.default_rng(2))
    assert ours == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    assert ours != pytest.approx(bootstrap_ci(a, n_resamples=1500, seed=2), abs=1e-6)
    paired = paired_bootstrap(a, b, n_resamples=1500, seed=2, method="BCa")
    ref = scipy_stats.bootstrap(
        (a, b),
        lambda x, y, axis: y.mean(axis) - x.mean(axis),
        paired=True,
        method="BCa",
        n_resamples=1500,
        rng=np.random.default_rng(2),
    )
    assert (paired["ci_low"], paired["ci_high"]) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)


def test_one_value_and_constant_data_are_point_intervals_for_both_methods():
    for method in ("percentile", "BCa"):
        assert bootstrap_ci([0.3], method=method) == (0.3, 0.3)
        assert bootstrap_ci([0.7] * 5, method=method) == (0.7, 0.7)
        one = paired_bootstrap([0.2], [0.5], method=method)
        assert (one["ci_low"], one["ci_high"], one["p_value"]) == pytest.approx((0.3, 0.3, 1 / 1001))
    with pytest.raises(ValueError, match="percentile"):
        bootstrap_ci([0.1, 0.2], method="basic")


def test_paired_bootstrap_without_a_pair_scored_in_both_runs_is_undefined():
    assert paired_bootstrap([None, 0.5], [0.5, None]) == {
        "n": 0,
        "n_missing": 2,
        "delta": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
    }
