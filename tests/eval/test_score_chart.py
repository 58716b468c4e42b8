"""The score chart's bars on the 0-100 scale, by hand, and the figure it draws: a bar per group with its n, CI,
value, title and axis label."""

from rpbench.eval.report import chart_bars, score_chart


def summary(mean, n=4, ci=None):
    low, high = ci or (None, None)
    return {"mean": mean, "n": n, "ci_low": low, "ci_high": high}


def test_judge_accuracy_in_percent_per_paper_dimension_with_its_ci_and_judged_count():
    judge = {
        "dimensions": {
            k: {"accuracy": a, "judged": 4, "ci_low": a / 2, "ci_high": 1.0}
            for k, a in [("role_style", 0.5), ("nested", 0.25)]
        }
    }
    bars, what = chart_bars({"metrics": {"overall": {}}, "judge": judge}, "rougeL")
    assert what == "judge accuracy (%)"
    assert bars == {
        "Role Style": {"value": 50.0, "ci_low": 25.0, "ci_high": 100.0, "n": 4},
        "Nested": {"value": 25.0, "ci_low": 12.5, "ci_high": 100.0, "n": 4},
    }


def test_metric_per_dimension_then_overall_metrics_when_no_dimension_has_it():
    dims = {"role_style": {"rougeL": summary(0.2, 6, (0.1, 0.3))}, "nested": {"rougeL": summary(0.4, 5)}}
    bars, what = chart_bars({"metrics": {"overall": {}, "dimension": dims}}, "rougeL")
    assert what == "rougeL x 100" and list(bars) == ["Role Style", "Nested"]
    assert bars["Role Style"] == {"value": 20.0, "ci_low": 10.0, "ci_high": 30.0, "n": 6}
    # a judge without a verdict and no dimension with the metric: each overall metric; bleu_smoothed is 0-100
    overall = {"bleu": summary(0.5), "rougeL": summary(None, 0), "bleu_smoothed": summary(30.0)}
    results = {"metrics": {"overall": overall, "dimension": {}}, "judge": {"dimensions": {"nested": {}}}}
    results["judge"]["dimensions"]["nested"] = {"accuracy": None, "judged": 0}
    bars, what = chart_bars(results, "meteor")
    assert what == "overall metrics x 100"
    assert {k: b["value"] for k, b in bars.items()} == {"bleu": 50.0, "rougeL": None, "bleu_smoothed": 30.0}


def test_the_chart_names_the_run_the_groups_with_their_n_and_writes_each_value(tmp_path):
    bars = {
        "Knowledge Boundary": {"value": 36.6, "ci_low": 30.8, "ci_high": 42.5, "n": 24},
        "Nested": {"value": None, "ci_low": None, "ci_high": None, "n": 0},
    }
    fig = score_chart(bars, "rougeL x 100", "sft-tiny-qwen2-sample: rougeL x 100, 72 test records")
    [ax] = fig.axes
    assert ax.get_title() == "sft-tiny-qwen2-sample: rougeL x 100, 72 test records"
    assert ax.get_xlabel() == "rougeL x 100, with its 95% CI"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Knowledge Boundary (n=24)", "Nested (n=0)"]
    assert [t.get_text() for t in ax.texts] == ["36.6", "no value"]  # never a 0 bar for a group without a value
    assert [line.get_xdata().tolist() for line in ax.get_lines()] == [[30.8, 42.5]]
    fig.savefig(tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"
