"""The radar's spokes on the 0-100 scale, by hand, and the image it writes."""

from PIL import Image

from rpbench.eval.report import RADAR_DPI, RADAR_SIZE_INCHES, radar_chart, radar_values


def summary(mean):
    return {"mean": mean}


def test_judge_accuracy_in_percent_per_paper_dimension():
    judge = {
        "dimensions": {k: {"accuracy": a} for k, a in [("role_style", 0.5), ("nested", 0.25), ("prioritized", 1.0)]}
    }
    values, title = radar_values({"metrics": {"overall": {}}, "judge": judge}, "rougeL")
    assert values == {"Role Style": 50.0, "Nested": 25.0, "Prioritized": 100.0} and title == "judge accuracy (%)"


def test_metric_per_dimension_then_overall_metrics_when_fewer_than_three():
    dims = {
        "role_style": {"rougeL": summary(0.2)},
        "nested": {"rougeL": summary(0.4)},
        "multi_turn": {"rougeL": summary(0.1)},
    }
    values, title = radar_values({"metrics": {"overall": {}, "dimension": dims}}, "rougeL")
    assert values == {"Role Style": 20.0, "Multi-turn": 10.0, "Nested": 40.0} and title == "rougeL x 100"
    # two dimensions (and a judge with all verdicts unparsed): each overall metric; bleu_smoothed is 0-100 already
    overall = {"bleu": summary(0.5), "rougeL": summary(0.25), "bleu_smoothed": summary(30.0)}
    judge = {"dimensions": {"nested": {"accuracy": None}}}
    results = {"metrics": {"overall": overall, "dimension": dict(list(dims.items())[:2])}, "judge": judge}
    assert radar_values(results, "rougeL") == (
        {"bleu": 50.0, "rougeL": 25.0, "bleu_smoothed": 30.0},
        "overall metrics x 100",
    )


def test_the_chart_is_a_png_of_the_drawn_size(tmp_path):
    path = radar_chart({"a": 10.0, "b": 90.0, "c": 55.0}, "t", tmp_path / "radar.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (
            RADAR_SIZE_INCHES[0] * RADAR_DPI,
            RADAR_SIZE_INCHES[1] * RADAR_DPI,
        )
    assert radar_chart({"a": 1.0, "b": None}, "t", tmp_path / "none.png") is None
