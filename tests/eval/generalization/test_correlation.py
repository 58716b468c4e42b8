"""Correlations against scipy, and their bootstrap intervals against scipy.stats.bootstrap on the same
points and generator, and by hand on a perfectly linear case."""

import numpy as np
import pytest
import scipy.stats

from rpbench.eval.generalization.correlation import bootstrap_interval, correlate, pearson, spearman, winrate_drop

BOOT = {"n_resamples": 200, "seed": 3, "confidence": 0.95}


def test_correlations_match_scipy_and_align_by_key():
    remi = {("a", "ID"): 0.1, ("b", "ID"): 0.4, ("c", "ID"): 0.35, ("d", "ID"): 0.8}
    winrate = {("d", "ID"): 0.9, ("a", "ID"): 0.2, ("c", "ID"): 0.3, ("b", "ID"): 0.5}  # other order
    result = correlate(remi, winrate, **BOOT)
    x, y = [0.1, 0.4, 0.35, 0.8], [0.2, 0.5, 0.3, 0.9]
    assert result.pearson_r == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
    assert result.pearson_p == pytest.approx(scipy.stats.pearsonr(x, y).pvalue)
    assert result.spearman_rho == pytest.approx(1.0) and result.n == 4
    with pytest.raises(ValueError, match="only in judge"):
        correlate(remi, {**winrate, ("e", "ID"): 0.1}, **BOOT)
    assert winrate_drop(0.6, 0.45) == pytest.approx(0.15)


@pytest.mark.parametrize("statistic", [pearson, spearman])
def test_bootstrap_interval_is_scipys_percentile_bootstrap(statistic):
    rng = np.random.default_rng(11)
    x = rng.normal(size=15)
    y = 0.6 * x + rng.normal(scale=0.8, size=15)
    ours = bootstrap_interval(x, y, statistic, n_resamples=500, seed=5, confidence=0.9)
    theirs = scipy.stats.bootstrap(
        (x, y),
        statistic,
        paired=True,
        vectorized=False,
        n_resamples=500,
        confidence_level=0.9,
        method="percentile",
        rng=np.random.default_rng(5),
    ).confidence_interval
    assert ours.undefined_resamples == 0
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=1e-12)
    assert ours.low < statistic(x, y) < ours.high


def test_bootstrap_on_a_line_by_hand():
    # y = 2x + 1 over 3 points: every resample with two distinct points has r = 1; one repeating a
    # single point has no r and is counted, not used. With 3 points, about 1 in 9 resamples repeats one.
    x = np.array([0.0, 1.0, 2.0])
    interval = bootstrap_interval(x, 2 * x + 1, pearson, n_resamples=900, seed=0, confidence=0.95)
    assert (interval.low, interval.high) == pytest.approx((1.0, 1.0))
    assert 60 <= interval.undefined_resamples <= 140
    drawn = np.random.default_rng(0).integers(0, 3, (900, 3))
    assert interval.undefined_resamples == int((drawn.min(axis=1) == drawn.max(axis=1)).sum())
    constant = bootstrap_interval(x, np.ones(3), pearson, n_resamples=10, seed=0, confidence=0.95)
    assert constant.low is None and constant.undefined_resamples == 10
