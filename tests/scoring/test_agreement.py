"""Reward-model agreement statistics against hand-computed values and numpy-free peers (statistics module)."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from rpbench.scoring.agreement import (
    ScoredSample,
    agreement,
    alpha_over_queries,
    cronbach_alpha,
    mae,
    model_scores,
    pearson,
    rmse,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# (model, query, metric, reference pair, predicted pair or None); ratios in the comments.
SAMPLES = [
    ScoredSample("m1", "q1", "A", (8, 10), (9, 10)),  # 0.8 vs 0.9
    ScoredSample("m1", "q2", "A", (5, 10), (4, 8)),  # 0.5 vs 0.5
    ScoredSample("m2", "q1", "A", (10, 10), None),  # 1.0 vs unreadable
    ScoredSample("m1", "q1", "B", (6, 8), (6, 8)),  # 0.75 vs 0.75
    ScoredSample("m1", "q2", "B", (9, 9), (7, 7)),  # 1.0 vs 1.0
    ScoredSample("m2", "q1", "B", (4, 8), (2, 8)),  # 0.5 vs 0.25
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


def test_unreadable_scores_by_policy():
    rng = random.Random(3)
    assert model_scores(SAMPLES, "random_score", 3)[2] == rng.random()  # the paper: a random score a/b
    rng = random.Random(3)
    assert model_scores(SAMPLES, "random_pair", 3)[2] == rng.randint(1, 10) / rng.randint(1, 10)
    assert model_scores(SAMPLES, "exclude", 3) == [0.9, 0.5, None, 0.75, 1.0, 0.25]
    with pytest.raises(ValueError, match="evaluator.parse_failure"):
        model_scores(SAMPLES, "zero", 3)


def test_agreement_per_metric_overall_with_the_papers_random_score():
    found = agreement(SAMPLES, ["A", "B"], "random_score", seed=3)
    fill = random.Random(3).random()  # the one failure (m2 q1, A)
    a, b, overall = found["per_metric"]["A"], found["per_metric"]["B"], found["overall"]
    assert (a["n"], a["n_scored"], a["n_counted"], a["success_rate"]) == (3, 2, 3, pytest.approx(2 / 3))
    assert (b["success_rate"], overall["success_rate"], found["parse_failures"]) == (1.0, pytest.approx(5 / 6), 1)
    assert found["parse_failure"] == "random_score"
    # scored only, metric A: ratios 0.9, 0.5 vs 0.8, 0.5
    assert a["scored_only"]["ratio"]["mae"] == pytest.approx(0.05)
    assert a["scored_only"]["ratio"]["rmse"] == pytest.approx(math.sqrt(0.01 / 2))
    assert a["scored_only"]["ratio"]["pearson"] == pytest.approx(1.0)
    # raw scores of A's scored pairs: 9 10 4 8 vs 8 10 5 10
    assert a["scored_only"]["raw"]["mae"] == pytest.approx(1.0)
    assert a["scored_only"]["raw"]["rmse"] == pytest.approx(math.sqrt(1.5))
    # the failure counted with its random score
    assert a["ratio"]["mae"] == pytest.approx((0.1 + 0 + abs(fill - 1.0)) / 3)
    # metric B, all scored: 0.75 1.0 0.25 vs 0.75 1.0 0.5
    assert b["scored_only"]["ratio"]["mae"] == pytest.approx(0.25 / 3)
    assert b["scored_only"]["ratio"]["rmse"] == pytest.approx(math.sqrt(0.0625 / 3))
    assert b["scored_only"]["ratio"]["pearson"] == pytest.approx(0.9819805, abs=1e-6)
    assert b["scored_only"]["ratio"]["pearson"] == pytest.approx(
        statistics.correlation([0.75, 1, 0.25], [0.75, 1, 0.5])
    )
    assert b["ratio"] == b["scored_only"]["ratio"]
    # overall pools the samples of every metric
    pred, ref = [0.9, 0.5, fill, 0.75, 1.0, 0.25], [0.8, 0.5, 1.0, 0.75, 1.0, 0.5]
    assert overall["ratio"]["mae"] == pytest.approx(statistics.mean(abs(p - r) for p, r in zip(pred, ref)))
    assert overall["ratio"]["pearson"] == pytest.approx(statistics.correlation(pred, ref))
    assert overall["scored_only"]["ratio"]["mae"] == pytest.approx((0.1 + 0 + 0 + 0 + 0.25) / 5)


def test_excluded_failures_leave_the_statistics_of_the_readable_samples():
    found = agreement(SAMPLES, ["A", "B"], "exclude", seed=3)
    assert found["overall"]["n_counted"] == 5 and found["parse_failures"] == 1
    assert found["overall"]["ratio"] == found["overall"]["scored_only"]["ratio"]


def test_the_papers_alpha_takes_queries_as_items_and_models_as_cases():
    # three models (cases) x two queries (items); a cell = the mean over metrics A and B of the ratios
    samples = [
        ScoredSample(model, query, metric, ref, ref)
        for model, query, (a, b) in [
            ("m1", "q1", ((8, 10), (6, 10))),  # mean 0.7
            ("m1", "q2", ((9, 10), (9, 10))),  # 0.9
            ("m2", "q1", ((5, 10), (5, 10))),  # 0.5
            ("m2", "q2", ((6, 10), (8, 10))),  # 0.7
            ("m3", "q1", ((9, 10), (9, 10))),  # 0.9
            ("m3", "q2", ((10, 10), (8, 10))),  # 0.9
        ]
        for metric, ref in (("A", a), ("B", b))
    ]
    items = [[0.7, 0.5, 0.9], [0.9, 0.7, 0.9]]
    # by hand: item variances 0.04, 0.04/3; totals 1.6 1.2 1.8, variance 0.28/3: 2 (1 - 0.16/3 / (0.28/3))
    assert cronbach_alpha(items) == pytest.approx(2 * (1 - 0.16 / 0.28))
    found = agreement(samples, ["A", "B"], "random_score", seed=0)["cronbach_alpha"]
    assert found["queries_as_items"]["reference"] == {
        "alpha": pytest.approx(peer_alpha(items)),
        "models": 3,
        "queries": 2,
    }
    assert found["queries_as_items"]["model"] == found["queries_as_items"]["reference"]
    # the per-metric alpha: items A and B, cases the six answered records
    per_metric = [[0.8, 0.9, 0.5, 0.6, 0.9, 1.0], [0.6, 0.9, 0.5, 0.8, 0.9, 0.8]]
    assert found["metrics_as_items"]["reference"] == {"alpha": pytest.approx(peer_alpha(per_metric)), "records": 6}


def test_the_papers_alpha_uses_the_queries_every_model_was_scored_on():
    found = agreement(SAMPLES, ["A", "B"], "exclude", seed=3)["cronbach_alpha"]
    # m2 answered only q1, and its score for A there is unreadable: with exclude no query has both models
    assert found["queries_as_items"]["model"] == {"alpha": None, "models": 2, "queries": 0}
    # the reference judge scored both models on q1 only: one item, alpha undefined
    assert found["queries_as_items"]["reference"] == {"alpha": None, "models": 2, "queries": 1}
    assert found["metrics_as_items"]["model"]["records"] == 2  # (m1, q1), (m1, q2)
    assert found["metrics_as_items"]["model"]["alpha"] == pytest.approx(peer_alpha([[0.9, 0.5], [0.75, 1.0]]))
    assert alpha_over_queries([], [], ["A"]) == {"alpha": None, "models": 0, "queries": 0}


def test_random_scores_are_seeded():
    failing = [ScoredSample("m", f"q{i}", "A", (5, 10), None) for i in range(5)]
    failing.append(ScoredSample("m", "x", "A", (5, 10), (5, 10)))
    first, again = agreement(failing, ["A"], "random_score", seed=7), agreement(failing, ["A"], "random_score", seed=7)
    assert first == again and first["parse_failures"] == 5 and first["fill_seed"] == 7
    assert agreement(failing, ["A"], "random_score", seed=8)["overall"]["ratio"] != first["overall"]["ratio"]


RELEASED_REVIEWS = SHARED_DATA / "mmrole" / "in-test_reviews"


@pytest.mark.skipif(not RELEASED_REVIEWS.is_dir(), reason=f"the MMRole release's reviews are not at {RELEASED_REVIEWS}")
def test_the_papers_alpha_of_the_released_reward_model_on_the_release():
    """MMRole-Eval_RM's scores of the three released models on the 216 In-Test queries, items = queries: the
    same value as the covariance form over a table built here directly from the files."""
    samples, table = [], {}
    for path in sorted(RELEASED_REVIEWS.glob("*/*.json")):
        for record in json.loads(path.read_text()):
            query = f"{path.stem}/{record['id']}"
            ratios = []
            for metric, review in record["rm_review"].items():
                pair = tuple(review["score"])
                samples.append(ScoredSample(path.parent.name, query, metric, pair, pair))
                ratios.append(pair[0] / pair[1])
            table.setdefault(query, {})[path.parent.name] = statistics.mean(ratios)
    metrics = list(dict.fromkeys(s.metric for s in samples))
    found = alpha_over_queries(samples, [s.reference[0] / s.reference[1] for s in samples], metrics)
    items = [[row[m] for m in sorted(row)] for row in table.values()]
    assert (found["models"], found["queries"]) == (3, 216)
    assert found["alpha"] == pytest.approx(peer_alpha(items)) and found["alpha"] == pytest.approx(0.9945, abs=1e-4)
