"""Reward-model agreement statistics against hand-computed values and numpy-free peers (statistics module)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from rpbench.scoring.agreement import ScoredSample, agreement, cronbach_alpha, mae, pearson, rmse

# (case, metric, reference pair, predicted pair or None); ratios in the comments.
SAMPLES = [
    ScoredSample("c1", "A", (8, 10), (9, 10)),  # 0.8 vs 0.9
    ScoredSample("c2", "A", (5, 10), (4, 8)),  # 0.5 vs 0.5
    ScoredSample("c3", "A", (10, 10), None),  # 1.0 vs unreadable
    ScoredSample("c1", "B", (6, 8), (6, 8)),  # 0.75 vs 0.75
    ScoredSample("c2", "B", (9, 9), (7, 7)),  # 1.0 vs 1.0
    ScoredSample("c3", "B", (4, 8), (2, 8)),  # 0.5 vs 0.25
]


def peer_alpha(items):
    """Cronbach's alpha from the mean inter-item covariance: k c / (v + (k - 1) c)."""
    k = len(items)
    v = statistics.mean(statistics.variance(item) for item in items)
    c = statistics.mean(statistics.covariance(items[i], items[j]) for i in range(k) for j in range(k) if i != j)
    return k * c / (v + (k - 1) * c)


def test_errors_and_correlation_by_hand():
    assert mae([1, 2, 3], [1, 3, 2]) == pytest.approx(2 / 3)
    assert rmse([1, 2, 3], [1, 3, 2]) == pytest.approx(math.sqrt(2 / 3))
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)  # sxy 1, sxx 2, syy 2
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(statistics.correlation([1, 2, 3], [1, 3, 2]))
    assert pearson([1, 2, 3], [5, 5, 5]) is None and pearson([1], [2]) is None
    assert mae([], []) is None and rmse([], []) is None


def test_cronbach_alpha_by_hand_and_against_the_covariance_form():
    assert cronbach_alpha([[1, 2, 3], [2, 3, 4]]) == pytest.approx(1.0)  # variances 1, 1; totals 3 5 7: 4
    assert cronbach_alpha([[1, 2, 3], [1, 3, 2]]) == pytest.approx(2 / 3)  # totals 2 5 5: variance 3
    assert cronbach_alpha([[1, 2, 3], [3, 2, 1]]) is None  # constant totals
    assert cronbach_alpha([[1, 2, 3]]) is None
    items = [[7, 8, 5, 9, 6], [6, 8, 6, 9, 5], [8, 9, 4, 7, 7]]
    assert cronbach_alpha(items) == pytest.approx(peer_alpha(items))


def test_agreement_per_metric_overall_with_and_without_random_fill():
    found = agreement(SAMPLES, ["A", "B"], seed=3)
    rng = random.Random(3)
    fill = (rng.randint(1, 10), rng.randint(1, 10))  # the one failure (c3, A), drawn in sample order
    a, b, overall = found["per_metric"]["A"], found["per_metric"]["B"], found["overall"]
    assert (a["n"], a["n_scored"], a["success_rate"]) == (3, 2, pytest.approx(2 / 3))
    assert (b["success_rate"], overall["success_rate"], found["random_fills"]) == (1.0, pytest.approx(5 / 6), 1)
    # scored only, metric A: ratios 0.9, 0.5 vs 0.8, 0.5
    assert a["scored_only"]["ratio"]["mae"] == pytest.approx(0.05)
    assert a["scored_only"]["ratio"]["rmse"] == pytest.approx(math.sqrt(0.01 / 2))
    assert a["scored_only"]["ratio"]["pearson"] == pytest.approx(1.0)
    # raw scores of A's scored pairs: 9 10 4 8 vs 8 10 5 10
    assert a["scored_only"]["raw"]["mae"] == pytest.approx(1.0)
    assert a["scored_only"]["raw"]["rmse"] == pytest.approx(math.sqrt(1.5))
    # with the paper's random fill
    assert a["with_random_fill"]["ratio"]["mae"] == pytest.approx((0.1 + 0 + abs(fill[0] / fill[1] - 1.0)) / 3)
    # metric B, all scored: 0.75 1.0 0.25 vs 0.75 1.0 0.5
    assert b["scored_only"]["ratio"]["mae"] == pytest.approx(0.25 / 3)
    assert b["scored_only"]["ratio"]["rmse"] == pytest.approx(math.sqrt(0.0625 / 3))
    assert b["scored_only"]["ratio"]["pearson"] == pytest.approx(0.9819805, abs=1e-6)
    assert b["scored_only"]["ratio"]["pearson"] == pytest.approx(
        statistics.correlation([0.75, 1, 0.25], [0.75, 1, 0.5])
    )
    assert b["with_random_fill"] == b["scored_only"]
    # overall pools the samples of every metric
    pred, ref = [0.9, 0.5, fill[0] / fill[1], 0.75, 1.0, 0.25], [0.8, 0.5, 1.0, 0.75, 1.0, 0.5]
    assert overall["with_random_fill"]["ratio"]["mae"] == pytest.approx(
        statistics.mean(abs(p - r) for p, r in zip(pred, ref))
    )
    assert overall["with_random_fill"]["ratio"]["pearson"] == pytest.approx(statistics.correlation(pred, ref))
    assert overall["scored_only"]["ratio"]["mae"] == pytest.approx((0.1 + 0 + 0 + 0 + 0.25) / 5)


def test_cronbach_alpha_items_are_metrics_and_cases_answered_records():
    found = agreement(SAMPLES, ["A", "B"], seed=3)["cronbach_alpha"]
    rng = random.Random(3)
    fill = rng.randint(1, 10) / rng.randint(1, 10)
    assert found["cases"] == 3 and found["scored_only_cases"] == 2  # c3 has no readable score for A
    assert found["reference"] == pytest.approx(peer_alpha([[0.8, 0.5, 1.0], [0.75, 1.0, 0.5]]))
    assert found["with_random_fill"] == pytest.approx(peer_alpha([[0.9, 0.5, fill], [0.75, 1.0, 0.25]]))
    assert found["scored_only"] == pytest.approx(peer_alpha([[0.9, 0.5], [0.75, 1.0]]))


def test_random_fill_is_seeded():
    failing = [ScoredSample(f"c{i}", "A", (5, 10), None) for i in range(5)] + [ScoredSample("x", "A", (5, 10), (5, 10))]
    first, again = agreement(failing, ["A"], seed=7), agreement(failing, ["A"], seed=7)
    assert first == again and first["random_fills"] == 5 and first["fill_seed"] == 7
    assert agreement(failing, ["A"], seed=8)["overall"]["with_random_fill"] != first["overall"]["with_random_fill"]
