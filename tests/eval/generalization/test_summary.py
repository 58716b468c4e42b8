"""The multi-model summary on synthetic metrics.json files: the (run, category) points of the score
and drop settings by hand, correlations against scipy on those points (and of the bound from n samples
with the full-data R-EMID), named errors for missing points and for runs not scored alike, and
experiments/rpgbench/summarize.py as a user runs it."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import scipy.stats

from rpbench.eval.generalization.summary import markdown, severity_across_runs_figure, summarize_runs, write_summary

REPO_ROOT = Path(__file__).resolve().parents[3]

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
SCRIPT = REPO_ROOT / "experiments" / "rpgbench" / "summarize.py"
SIZES = [2, 3]  # convergence_sizes; every category here has 4 samples, so n = 2, 3 and the largest, 4
# Theorem 3.4's bound per (repeat, n) of each shifted category: model -> category -> [[n=2, n=3, n=4] per repeat]
BOUNDS = {
    "qwen": {"german": [[1.9, 1.6, 1.5], [2.1, 1.5, 1.5]], "Literature": [[1.2, 1.1, 1.0], [1.4, 1.0, 1.0]],
             "TurnLevelComposition": [[0.9, 0.6, 0.5], [0.7, 0.8, 0.5]]},
    "llama": {"german": [[2.2, 1.8, 1.7], [2.0, 1.9, 1.7]], "Literature": [[1.3, 0.9, 0.8], [0.9, 1.1, 0.8]],
              "TurnLevelComposition": [[0.5, 0.4, 0.3], [0.6, 0.5, 0.3]]},
    "mistral": {"german": [[1.0, 1.3, 1.2], [1.2, 1.1, 1.2]], "Literature": [[1.6, 1.3, 1.2], [1.0, 1.2, 1.2]],
                "TurnLevelComposition": [[0.2, 0.3, 0.2], [0.4, 0.2, 0.2]]},
}  # fmt: skip


def provenance(**changes):
    """A run's eval.generalization.provenance as rpbench writes it (analysis_provenance), with ``changes``
    (dotted key -> value) applied."""
    tree = {
        "critic": {"description": "critic of run corl-qwen3-4b", "adapters": [], "is_evaluated_model": False},
        "reasoner": {"description": "reasoner of run corl-qwen3-4b", "adapters": [], "is_evaluated_model": False},
        "encoder": {"encoder": "xlm-roberta-base", "layer": 0, "pooling": "mean_skip_first", "max_length": 512,
                    "fallback_used": False},
        "prompts": {"pxy_user": "a" * 64, "thought_user": "b" * 64},
        "analysis": {"weighting": "equal", "delta_form": "sum", "n_negatives": 1000, "seed": 42,
                     "convergence_sizes": SIZES, "reasoning": {"temperature": 0.0, "max_new_tokens": 2048}},
    }  # fmt: skip
    for dotted, value in changes.items():
        *path, leaf = dotted.split(".")
        node = tree
        for key in path:
            node = node[key]
        node[leaf] = value
    return tree


def convergence(name, emid_key):
    return {
        "empirical": emid_key,
        "points": {
            c: [
                {"n": n, "repeat": k, "bound": b, "empirical": 0.0}
                for k, row in enumerate(repeats)
                for n, b in zip([*SIZES, 4], row)
            ]
            for c, repeats in BOUNDS[name].items()
        },
    }


def write_run(
    root, name, remi, winrates, reasoning=True, drop_winrate_of=None, drop_jsd_of=None, prov=None, model=None
):
    run = root / name
    run.mkdir(parents=True)
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
        "winrate": {"judges": ["0:a", "1:b", "2:c"], "prompt_version": "v2", "by_category": by_category},
        "generalization": {
            "settings": {"convergence_sizes": SIZES},
            "convergence": convergence(model or (name if name in BOUNDS else "qwen"), emid_key),
            **({} if prov is False else {"provenance": prov or provenance()}),
        },
    }
    if reasoning:  # a run with reasoning reports plain EMI / EMID too
        ev["emi"], ev["emid"] = {c: {"emi": 0.0} for c in CATEGORIES}, {c: 0.0 for c in CATEGORIES[1:]}
    (run / "metrics.json").write_text(json.dumps({"eval": ev}))
    return run


@pytest.fixture
def runs(tmp_path):
    return [write_run(tmp_path, name, *values) for name, values in MODELS.items()]


def test_score_and_drop_points_and_correlations_by_hand(runs):
    summary = summarize_runs(runs, n_resamples=100, seed=1)
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
    assert summary["bootstrap"]["n_resamples"] == 100 and summary["bootstrap"]["seed"] == 1
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


def test_the_pilot_figure_across_runs_numbers_each_category_once_and_names_the_runs(runs):
    summary = summarize_runs(runs, n_resamples=20)
    fig = severity_across_runs_figure(summary)
    [ax] = fig.axes
    severity = {p["category"]: p["js_severity"] for p in summary["points"]["severity"]}
    key = "\n".join(f"{n:>2}  {c}" for n, c in enumerate(sorted(severity, key=severity.get), 1))
    assert [t.get_text() for t in ax.texts] == ["1", "2", "3", key]  # not three runs' names at each category
    assert ax.get_xlabel() == "JS severity (user + character + dialogue)"
    assert ax.get_ylabel() == "WinRate (judge ensemble mean)"
    assert ax.get_title() == "WinRate against shift severity per shifted category, 3 runs"
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == summary["runs"]


@pytest.mark.slow
def test_summarize_script(runs, tmp_path, run_script):
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


def _mean(values):
    return sum(values) / len(values)


def test_bound_from_n_samples_vs_full_data_remid_against_scipy(runs):
    # llama's Literature category is small: its convergence has n = 2 only (its largest), so n = 3 lacks it
    path = runs[1] / "metrics.json"
    metrics = json.loads(path.read_text())
    points = metrics["eval"]["generalization"]["convergence"]["points"]
    points["Literature"] = [p for p in points["Literature"] if p["n"] == 2]
    path.write_text(json.dumps(metrics))
    summary = summarize_runs(runs, n_resamples=60, seed=3)
    b = summary["bound_vs_remid"]
    assert [row["samples_per_split"] for row in b["by_n"]] == [2, 3, "largest"]
    assert b["empirical"].startswith("r_emid on all the category's samples")
    for row, column in zip(b["by_n"], (0, 1, 2)):
        x, y = [], []
        for name, (remi, _) in MODELS.items():
            for k, category in enumerate(CATEGORIES[1:], start=1):
                repeats = BOUNDS[name][category]
                if name == "llama" and category == "Literature":
                    if column == 1:
                        continue  # no n = 3 subsample
                    repeats = [r[:1] for r in repeats]  # its largest is n = 2
                x.append(_mean([r[min(column, len(r) - 1)] for r in repeats]))
                y.append(remi[0] - remi[k])  # the R-EMID of every sample, not of the subsample
        assert row["missing"] == (["llama/Literature"] if column == 1 else [])
        assert len(row["points"]) == row["n"] == len(x)
        assert sorted(p["bound"] for p in row["points"]) == pytest.approx(sorted(x))
        assert row["pearson_r"] == pytest.approx(scipy.stats.pearsonr(x, y).statistic)
        assert row["pearson_p"] == pytest.approx(scipy.stats.pearsonr(x, y).pvalue)
        assert row["spearman_rho"] == pytest.approx(scipy.stats.spearmanr(x, y).statistic)
        assert row["spearman_p"] == pytest.approx(scipy.stats.spearmanr(x, y).pvalue)
        assert row["pearson_ci"]["low"] <= row["pearson_r"] <= row["pearson_ci"]["high"]
    table = markdown(summary)
    assert "| 3 | 8 | 1 |" in table and "| largest | 9 | 0 |" in table


def test_runs_not_scored_alike_are_refused_naming_runs_and_keys(tmp_path):
    (qwen, llama, mistral) = MODELS.values()
    a = write_run(tmp_path, "qwen", *qwen)
    fallback = provenance(**{"encoder.encoder": "MiniLM", "encoder.fallback_used": True})
    b = write_run(tmp_path, "llama", *llama, prov=fallback)
    c = write_run(tmp_path, "mistral", *mistral, prov=provenance(**{"critic.description": "model=qwen3-8b"}))
    with pytest.raises(ValueError) as refused:
        summarize_runs([a, b, c], n_resamples=20)
    message = str(refused.value)
    assert "runs ['qwen', 'llama', 'mistral'] were not scored alike" in message
    assert "encoder.fallback_used differs: qwen=False, llama=True, mistral=False" in message
    assert (
        "critic.description differs: qwen='critic of run corl-qwen3-4b', llama='critic of run corl-qwen3-4b', "
        in message
    )
    assert "--allow-mixed" in message
    self_critic = provenance(**{"critic.is_evaluated_model": True, "critic.description": "the evaluated model"})
    selfish = [write_run(tmp_path / "self", n, *v, prov=self_critic) for n, v in MODELS.items()]
    with pytest.raises(ValueError, match=r"critic=self \(EMI not comparable .*\): \['llama', 'mistral', 'qwen'\]"):
        summarize_runs(selfish, n_resamples=20)
    old = write_run(tmp_path / "old", "mistral", *mistral, prov=False)
    with pytest.raises(ValueError, match=r"no eval.generalization.provenance .*: \['mistral'\]"):
        summarize_runs([a, old], n_resamples=20)
    judges = json.loads((c / "metrics.json").read_text())
    judges["eval"]["generalization"]["provenance"] = provenance()
    judges["eval"]["winrate"]["judges"] = ["0:a"]
    (c / "metrics.json").write_text(json.dumps(judges))
    with pytest.raises(ValueError, match=r"winrate.judges differs: qwen=\['0:a', '1:b', '2:c'\], mistral=\['0:a'\]"):
        summarize_runs([a, c], n_resamples=20)


def test_allow_mixed_correlates_them_and_says_what_differs(tmp_path):
    (qwen, llama, mistral) = MODELS.values()
    fallback = provenance(**{"encoder.encoder": "MiniLM", "encoder.fallback_used": True})
    runs = [
        write_run(tmp_path, "qwen", *qwen),
        write_run(tmp_path, "llama", *llama, prov=fallback),
        write_run(tmp_path, "mistral", *mistral, prov=provenance(**{"analysis.delta_form": "max"})),
    ]
    summary = summarize_runs(runs, n_resamples=20, allow_mixed=True)
    alike = summary["comparability"]
    assert alike["mixed"] and alike["encoder_fallback"] == ["llama"] and alike["critic_self"] == []
    assert alike["differing"] == {
        "analysis.delta_form": {"qwen": "sum", "llama": "sum", "mistral": "max"},
        "encoder.encoder": {"qwen": "xlm-roberta-base", "llama": "MiniLM", "mistral": "xlm-roberta-base"},
        "encoder.fallback_used": {"qwen": False, "llama": True, "mistral": False},
    }
    assert summary["drop"]["n"] == 9  # correlated anyway
    table = markdown(summary)
    assert "**Mixed runs (--allow-mixed): these points were not scored alike.**" in table
    assert "- analysis.delta_form differs: qwen='sum', llama='sum', mistral='max'" in table
    assert "fallback encoder (English only) stood in for the JS encoder in: llama." in table
    # the script's flag, in-process: the same summary, the differences printed
    out = tmp_path / "summary"
    argv = ["summarize.py", *map(str, runs), "--out-dir", str(out), "--resamples", "20", "--allow-mixed"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", argv)
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert json.loads((out / "summary.json").read_text())["comparability"] == json.loads(json.dumps(alike))
    assert "encoder.fallback_used differs" in (out / "summary.md").read_text()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", argv[:-1])
        with pytest.raises(ValueError, match="were not scored alike"):
            runpy.run_path(str(SCRIPT), run_name="__main__")


def test_alike_runs_using_the_fallback_encoder_are_named(tmp_path):
    fallback = provenance(**{"encoder.encoder": "MiniLM", "encoder.fallback_used": True})
    runs = [write_run(tmp_path, name, *values, prov=fallback) for name, values in MODELS.items()]
    summary = summarize_runs(runs, n_resamples=20)
    assert not summary["comparability"]["mixed"] and summary["comparability"]["encoder_fallback"] == sorted(MODELS)
    assert "stood in for the JS encoder in: llama, mistral, qwen." in markdown(summary)
