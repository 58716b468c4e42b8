"""The multi-model summary on synthetic metrics.json files: the (run, category) points of the score
and drop settings by hand, correlations against scipy on those points, named errors for missing
points, and experiments/rpgbench/summarize.py as a user runs it."""

from __future__ import annotations

import json

import pytest
import scipy.stats

from conftest import run_script
from rpbench.eval.generalization.summary import markdown, summarize_runs, write_summary

JSD = {  # input JS terms per shifted category (the same data for every model)
    "german": {"user": 0.20, "character": 0.05, "dialogue": 0.02, "delta_p": 0.3, "delta_q": 0.4},
    "Literature": {"user": 0.01, "character": 0.15, "dialogue": 0.03, "delta_p": 0.3, "delta_q": 0.4},
    "TurnLevelComposition": {"user": 0.02, "character": 0.01, "dialogue": 0.09, "delta_p": 0.3, "delta_q": 0.4},
}
# per model: R-EMI of IDTest, german, Literature, TurnLevelComposition, and WinRates in the same order
MODELS = {
    "qwen": ([0.50, 0.20, 0.35, 0.45], [0.70, 0.40, 0.55, 0.66]),
    "llama": ([0.40, 0.05, 0.30, 0.38], [0.62, 0.30, 0.58, 0.60]),
    "mistral": ([0.60, 0.42, 0.41, 0.57], [0.75, 0.52, 0.61, 0.73]),
}
CATEGORIES = ["IDTest", "german", "Literature", "TurnLevelComposition"]


def write_run(root, name, remi, winrates, reasoning=True, drop_winrate_of=None, drop_jsd_of=None):
    run = root / name
    run.mkdir()
    emi_key, emid_key = ("r_emi", "r_emid") if reasoning else ("emi", "emid")
    by_category = {
        c: {"winrate": w, "n_judges": 3, "judged": 12, "no_verdict": 0} for c, w in zip(CATEGORIES, winrates)
    }
    if drop_winrate_of:
        by_category[drop_winrate_of] = {"winrate": None, "n_judges": 0, "judged": 0, "no_verdict": 12}
    ev = {
        emi_key: {c: {"emi": v, "n": 4} for c, v in zip(CATEGORIES, remi)},
        emid_key: {c: remi[0] - v for c, v in zip(CATEGORIES[1:], remi[1:])},
        "jsd": {c: j for c, j in JSD.items() if c != drop_jsd_of},
        "winrate": {"judges": ["0:a", "1:b", "2:c"], "by_category": by_category},
    }
    if reasoning:  # a run with reasoning reports plain EMI / EMID too
        ev["emi"], ev["emid"] = {c: {"emi": 0.0} for c in CATEGORIES}, {c: 0.0 for c in CATEGORIES[1:]}
    (run / "metrics.json").write_text(json.dumps({"eval": ev}))
    return run


@pytest.fixture
def runs(tmp_path):
    return [write_run(tmp_path, name, *values) for name, values in MODELS.items()]


def test_score_and_drop_points_and_correlations_by_hand(runs):
    summary = summarize_runs(runs, n_resamples=300, seed=1)
    assert summary["metric"] == "R-EMI / R-EMID" and summary["runs"] == list(MODELS)
    score_x = [remi[k] for remi, _ in MODELS.values() for k in (1, 2, 3)]
    score_y = [wr[k] for _, wr in MODELS.values() for k in (1, 2, 3)]
    drop_x = [remi[0] - remi[k] for remi, _ in MODELS.values() for k in (1, 2, 3)]
    drop_y = [wr[0] - wr[k] for _, wr in MODELS.values() for k in (1, 2, 3)]
    points = summary["points"]
    assert [(p["run"], p["category"]) for p in points["score"]][:3] == [
        ("qwen", "Literature"),
        ("qwen", "TurnLevelComposition"),
        ("qwen", "german"),
    ]
    assert sorted(p["r_emi"] for p in points["score"]) == pytest.approx(sorted(score_x))
    llama_german = next(p for p in points["drop"] if p["run"] == "llama" and p["category"] == "german")
    assert llama_german["r_emid"] == pytest.approx(0.35) and llama_german["winrate_drop"] == pytest.approx(0.32)
    for setting, x, y in (("score", score_x, score_y), ("drop", drop_x, drop_y)):
        c = summary[setting]
        assert c["n"] == 9
        assert c["pearson_r"] == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
        assert c["pearson_p"] == pytest.approx(scipy.stats.pearsonr(x, y).pvalue)
        assert c["spearman_rho"] == pytest.approx(scipy.stats.spearmanr(x, y).statistic)
        assert c["spearman_p"] == pytest.approx(scipy.stats.spearmanr(x, y).pvalue)
        assert c["pearson_ci"]["low"] <= c["pearson_r"] <= c["pearson_ci"]["high"]
    assert summary["bootstrap"]["n_resamples"] == 300 and summary["bootstrap"]["seed"] == 1
    # the pilot figure's points: severity = user + character + dialogue JS
    mistral_turn = next(
        p for p in points["severity"] if p["run"] == "mistral" and p["category"] == "TurnLevelComposition"
    )
    assert mistral_turn["js_severity"] == pytest.approx(0.12) and mistral_turn["winrate"] == 0.73


def test_score_setting_may_add_the_id_points(runs):
    summary = summarize_runs(runs, n_resamples=50, score_with_id=True)
    x = [v for remi, _ in MODELS.values() for v in remi]
    y = [v for _, wr in MODELS.values() for v in wr]
    assert summary["score"]["n"] == 12 and summary["drop"]["n"] == 9
    assert summary["score"]["pearson_r"] == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
    assert summary["score_categories"] == "IDTest and the shifted categories"


def test_plain_emi_runs_are_labelled(tmp_path):
    runs = [write_run(tmp_path, name, *values, reasoning=False) for name, values in MODELS.items()]
    summary = summarize_runs(runs, n_resamples=50)
    assert summary["metric"].startswith("EMI / EMID (no reasoning") and summary["score"]["metric"] == "emi"
    x = [remi[0] - remi[k] for remi, _ in MODELS.values() for k in (1, 2, 3)]
    y = [wr[0] - wr[k] for _, wr in MODELS.values() for k in (1, 2, 3)]
    assert summary["drop"]["spearman_rho"] == pytest.approx(scipy.stats.spearmanr(x, y).statistic)


def test_missing_points_and_mixed_runs_are_named_errors(tmp_path):
    qwen, llama = MODELS["qwen"], MODELS["llama"]
    a = write_run(tmp_path, "a", *qwen)
    with pytest.raises(ValueError, match="some runs have R-EMI and some only EMI"):
        summarize_runs([a, write_run(tmp_path, "b", *llama, reasoning=False)])
    c = write_run(tmp_path, "c", *llama, drop_winrate_of="Literature")
    with pytest.raises(
        ValueError, match=r"c: no winrate\[\"by_category\"\]\[...\]\[\"winrate\"\] for category 'Literature'"
    ):
        summarize_runs([a, c])
    d = write_run(tmp_path, "d", *llama, drop_winrate_of="IDTest")
    with pytest.raises(ValueError, match=r"d: no winrate.* for category 'IDTest'"):
        summarize_runs([a, d])
    e = write_run(tmp_path, "e", *llama, drop_jsd_of="german")
    with pytest.raises(ValueError, match=r"e: no jsd\[...\] for category 'german'"):
        summarize_runs([a, e])
    with pytest.raises(FileNotFoundError, match="no metrics.json"):
        summarize_runs([tmp_path / "absent"])
    (tmp_path / "x").mkdir()
    same = write_run(tmp_path / "x", "a", *llama)
    with pytest.raises(ValueError, match=r"different names, repeated: \['a'\]"):
        summarize_runs([a, same])


def test_summary_files_and_table(runs, tmp_path):
    summary = summarize_runs(runs, n_resamples=100)
    paths = write_summary(summary, tmp_path / "out")
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(summary))
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = markdown(summary)
    assert table == paths["markdown"].read_text()
    c = summary["drop"]
    row = next(line for line in table.splitlines() if line.startswith("| drop: r_emid vs winrate_drop |"))
    assert f"| 9 | {c['pearson_r']:.3f} |" in row and f"[{c['pearson_ci']['low']:.3f}, " in row


def test_summarize_script(runs, tmp_path):
    out = tmp_path / "summary"
    result = run_script(
        "experiments/rpgbench/summarize.py", *map(str, runs), "--out-dir", str(out), "--resamples", "60"
    )
    assert result.returncode == 0, result.stderr
    written = json.loads((out / "summary.json").read_text())
    assert written == json.loads(json.dumps(summarize_runs(runs, n_resamples=60)))
    assert (out / "js_vs_winrate.png").is_file() and "| score: r_emi vs winrate | 9 |" in result.stdout
    assert str(tmp_path) not in (out / "summary.json").read_text()  # runs named by folder, no machine path
    assert written["bootstrap"]["n_resamples"] == 60
