"""Judge-vs-human statistics against scipy / scikit-learn and hand-computed values, a pairwise ratings file
with its three biases, and evaluator=judge_agreement on MMRole's released reviews with the shipped sample."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr
from sklearn.metrics import cohen_kappa_score

from rpbench.scoring.human_agreement import (
    agreement,
    cohen_kappa,
    kendall_tau_b,
    krippendorff_alpha,
    model_family,
    spearman,
)
from rpbench.scoring.human_ratings import read_human_ratings, read_judge_verdicts

REPO_ROOT = Path(__file__).resolve().parents[2]

MMROLE_SAMPLE = REPO_ROOT / "rpbench" / "resources" / "sample" / "human_ratings" / "mmrole_in_test.jsonl"


@pytest.mark.parametrize("seed", [0, 1])
def test_correlations_and_kappas_match_scipy_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    x, y = rng.integers(1, 6, 40).astype(float), rng.integers(1, 6, 40).astype(float)  # ties on both sides
    y[:20] = x[:20]  # some agreement
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    assert kendall_tau_b(x, y) == pytest.approx(kendalltau(x, y).statistic)
    for weights in (None, "linear", "quadratic"):
        assert cohen_kappa(x, y, weights) == pytest.approx(cohen_kappa_score(x, y, weights=weights))


def test_krippendorff_alpha_of_a_hand_computed_table():
    # units (1,1), (1,2), (2,2), (2,2), one unit rated once (not pairable): coincidences o11=2, o12=o21=1,
    # o22=4; n1=3, n2=5, n=8: D_o = 2/8, D_e = 2*3*5/(8*7); alpha = 1 - D_o/D_e = 8/15
    rows = [[1, 1, 2, 2, 1], [1, 2, 2, 2, None]]
    assert krippendorff_alpha(rows, "nominal") == pytest.approx(8 / 15)
    assert krippendorff_alpha([[1, 1], [1, 1]], "nominal") is None  # one value: undefined


def test_model_family():
    assert [model_family(m) for m in ("gpt-4o", "Qwen/Qwen2.5-7B", "llama-3-8b")] == ["gpt", "qwen", "llama"]


def write_lines(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pairwise_ratings_file_with_position_length_and_self_preference_biases(tmp_path):
    humans = write_lines(
        tmp_path / "humans.jsonl",
        [
            {"id": "i1", "rubric": "style", "ratings": ["a", "a", "b"], "models": {"a": "gpt-4o", "b": "llama-3"},
             "responses": {"a": "x" * 10, "b": "x" * 5}},
            {"id": "i2", "rubric": "style", "ratings": ["b", "b", "b"], "models": {"a": "gpt-4o", "b": "qwen-2"},
             "responses": {"a": "x" * 20, "b": "x" * 5}},
            {"id": "i3", "rubric": "style", "ratings": ["tie", "a", "b"], "models": {"a": "llama-3", "b": "qwen-2"},
             "responses": {"a": "x" * 5, "b": "x" * 5}},
            {"id": "i4", "rubric": "style", "ratings": ["b", "b", "a"], "models": {"a": "qwen-2", "b": "gpt-4o"},
             "responses": {"a": "x" * 3, "b": "x" * 9}},
        ],
    )  # fmt: skip
    judge = write_lines(
        tmp_path / "judge.jsonl",
        [
            {"id": "i1", "rubric": "style", "verdict": "a", "swapped_verdict": "a"},
            {"id": "i2", "rubric": "style", "verdict": "a", "swapped_verdict": "b"},
            {"id": "i3", "rubric": "style", "verdict": "tie", "swapped_verdict": "tie"},
            {"id": "i4", "rubric": "style", "verdict": "b", "swapped_verdict": "b"},
            {"id": "i5", "rubric": "style", "verdict": "b"},
        ],
    )
    items = read_human_ratings(humans)
    found = agreement(items, read_judge_verdicts(judge, pairwise=True), "ordinal", model_family("gpt-4o"))
    assert (found["n_compared"], found["n_verdicts_without_humans"], found["n_without_majority"]) == (4, 1, 1)
    assert found["accuracy"] == pytest.approx(2 / 3)  # i1 right, i2 wrong, i4 right (i3: no majority)
    judged, majority = [1, 1, -1], [1, -1, -1]  # a = 1, b = -1
    assert found["cohen_kappa"]["unweighted"] == pytest.approx(cohen_kappa_score(judged, majority))
    assert found["spearman"] == pytest.approx(spearmanr([1, 1, 0, -1], [1 / 3, -1, 0, -1 / 3]).statistic)
    bias = found["bias"]
    assert bias["position"] == {"n": 4, "swap_consistency": 0.75}
    assert bias["length"]["judge_spearman"] == pytest.approx(spearmanr([1, 1, 0, -1], [5, 15, 0, -6]).statistic)
    # gpt's response in i1, i2, i4: the judge picks it 3 times, the humans' majority twice
    assert bias["self_preference"] == {"judge_family": "gpt", "n_own": 3, "excess_over_humans": pytest.approx(1 / 3)}


def test_a_bad_rating_names_file_line_and_field(tmp_path):
    bad = write_lines(tmp_path / "humans.jsonl", [{"id": "r1", "rubric": "style", "ratings": []}])
    with pytest.raises(ValueError, match=r"humans.jsonl: record line 1 \(r1\): field 'ratings'"):
        read_human_ratings(bad)


def test_a_rating_outside_the_scale_names_file_line_and_field(tmp_path):
    """A rating of 1e9 on a 1-5 scale (once scored: an MAE of 333,333,330) is an error naming where it is."""
    rows = [{"id": "r1", "rubric": "style", "ratings": [4, 5]}, {"id": "r2", "rubric": "style", "ratings": [3, 1e9]}]
    humans = write_lines(tmp_path / "humans.jsonl", rows)
    with pytest.raises(
        ValueError, match=r"humans.jsonl: record line 2 \(r2\): field 'ratings': .*\[1, 5\].*got 1e\+09"
    ):
        read_human_ratings(humans, (1, 5))
    assert [item.ratings for item in read_human_ratings(humans, (0, 1e9))] == [(4.0, 5.0), (3.0, 1e9)]


@pytest.mark.parametrize(
    ("rows", "overrides", "named"),
    [
        ([{"id": "r1", "rubric": "style", "ratings": [1, 7]}], (), r"field 'ratings': ratings on the scale \[0, 1\]"),
        ("not json", (), r"humans.jsonl: record line 1: field '\(line\)': a JSON object"),
        ([{"id": "r1", "ratings": [1]}], (), r"record line 1: field 'rubric': a non-empty string"),
        ([{"id": "r1", "rubric": "s", "ratings": ["a", "b"]}], (), r"=.*humans.jsonl: pairwise ratings"),
        ([{"id": "r1", "rubric": "s", "ratings": [1]}], ("evaluator.human_scale=[2,1]",), r"low < high"),
    ],
)
def test_human_ratings_are_read_at_startup(compose, tmp_path, rows, overrides, named):
    """The file evaluator.human_ratings names is read by validate, before any model loads or generates."""
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    path = tmp_path / "humans.jsonl"
    path.write_text(rows + "\n") if isinstance(rows, str) else write_lines(path, rows)
    cfg = compose("objective=none", "judge=local", f"evaluator.human_ratings={path}", *overrides)
    with pytest.raises(ConfigError, match=r"evaluator\.human_(ratings|scale).*" + named):
        validate(cfg)


def test_judge_agreement_needs_a_scale_for_pointwise_ratings(compose, tmp_path):
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    verdicts = write_lines(tmp_path / "judge.jsonl", [{"id": "r1", "rubric": "s", "verdict": 1}])
    pointwise = write_lines(tmp_path / "pointwise.jsonl", [{"id": "r1", "rubric": "s", "ratings": [1, 9]}])
    pairwise = write_lines(tmp_path / "pairwise.jsonl", [{"id": "r1", "rubric": "s", "ratings": ["a", "tie"]}])
    agreement = ("objective=none", "evaluator=judge_agreement", f"evaluator.judge_verdicts={verdicts}")
    with pytest.raises(ConfigError, match=r"evaluator\.human_scale=None: expected \[low, high\]"):
        validate(compose(*agreement, f"evaluator.human_ratings={pointwise}"))
    with pytest.raises(ConfigError, match=r"pointwise.jsonl: record line 1 \(r1\): field 'ratings'.*\[1, 5\]"):
        validate(compose(*agreement, f"evaluator.human_ratings={pointwise}", "evaluator.human_scale=[1,5]"))
    validate(compose(*agreement, f"evaluator.human_ratings={pointwise}", "evaluator.human_scale=[1,10]"))
    validate(compose(*agreement, f"evaluator.human_ratings={pairwise}"))


def test_judge_agreement_on_mmrole_released_reviews(tmp_path, run_in_process):
    reviews = REPO_ROOT / "rpbench" / "resources" / "mmrole_release" / "in-test_reviews" / "qwen-vl-chat"
    results = run_in_process(
        tmp_path / "run",
        "objective=none",
        "logger=none",
        "evaluator=judge_agreement",
        f"evaluator.human_ratings={MMROLE_SAMPLE}",
        f"evaluator.judge_verdicts={reviews}",
        "evaluator.human_level=interval",
        "evaluator.human_scale=[0.1,10]",  # MMRole-Eval's ratio of two 1-10 scores
    )
    assert results["model"] == "not loaded"
    found = results["eval"]["judge_agreement"]
    humans = {(r["id"], r["rubric"]): r["ratings"] for r in map(json.loads, MMROLE_SAMPLE.read_text().splitlines())
              if r["model"] == "qwen-vl-chat"}  # fmt: skip
    ratios = {}
    for record in json.loads((reviews / "comment_test.json").read_text()):
        for metric, review in record["rm_review"].items():
            if (record["id"], metric) in humans:
                ratios[record["id"], metric] = review["score"][0] / review["score"][1]
    keys = sorted(humans)
    judge, center = [ratios[k] for k in keys], [np.mean(humans[k]) for k in keys]
    assert (found["n_compared"], found["n_without_verdict"]) == (12, 24)  # the other two models' items
    assert found["spearman"] == pytest.approx(spearmanr(judge, center).statistic)
    assert found["mae"] == pytest.approx(np.mean(np.abs(np.array(judge) - center)))
    assert found["accuracy"] is None and found["cohen_kappa"]["unweighted"] is None  # interval ratings
    assert "## Judge agreement with human ratings" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.parametrize("bad", [True, "high", float("nan"), [3]])
def test_a_rating_that_is_no_number_is_a_user_error_naming_file_line_and_field(tmp_path, bad):
    from rpbench.core.errors import RpbenchError

    path = tmp_path / "humans.jsonl"
    path.write_text(json.dumps({"id": "r1", "rubric": "style", "ratings": [4, bad]}) + "\n")  # NaN as JSON's NaN
    with pytest.raises(RpbenchError, match=r"humans.jsonl, line 1 \(record 'r1'\), ratings: expected a finite"):
        read_human_ratings(path)


def test_ratings_and_verdicts_sharing_no_item_warn_and_the_evaluator_refuses(tmp_path):
    from types import SimpleNamespace

    from rpbench.core.errors import RpbenchError
    from rpbench.eval.benchmarks.judge_agreement import JudgeAgreement

    humans = write_lines(tmp_path / "humans.jsonl", [{"id": "r1", "rubric": "style", "ratings": [4, 5]}])
    judge = write_lines(tmp_path / "judge.jsonl", [{"id": "other", "rubric": "style", "verdict": 4}])
    found = agreement(read_human_ratings(humans), read_judge_verdicts(judge, pairwise=False), "ordinal", None)
    assert found["n_compared"] == 0 and "none of the 1 rated items has a judge verdict" in found["warning"]
    settings = SimpleNamespace(human_ratings=str(humans), judge_verdicts=str(judge), human_level="ordinal",
                               judge_model=None)  # fmt: skip
    with pytest.raises(RpbenchError, match="share no item"):
        JudgeAgreement().from_files(SimpleNamespace(settings=settings))
