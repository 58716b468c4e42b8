"""`run.py data=sample_mmrole model=tiny-qwen2-vl objective=none evaluator=mmrole` (no judge), in-process:
the vision-language model generates with the records' images and the run writes MMRole's answers layout."""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict

from rpbench import pipeline
from rpbench.validate import validate


def test_vl_model_evaluates_mmrole_records_with_their_images(compose, tmp_path):
    cfg = compose(
        "data=sample_mmrole",
        "model=tiny-qwen2-vl",
        "+model.tiny.initializer_range=0.2",  # random weights whose replies are not empty
        "objective=none",
        "evaluator=mmrole",
        "evaluator.metrics=[bleu,rougeL]",
        "evaluator.generation.max_new_tokens=8",
        "data.max_test_samples=4",  # per test set: 4 In-Test, 4 Out-Test
        "logger=none",
    )
    out = tmp_path / "run"
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(out)
    results = pipeline.run(validate(cfg))

    generation = results["eval"]["generation"]
    assert generation["n_generated"] == 8 and generation["images"] == {"used": 8, "history_dropped": 0}
    assert json.loads((out / "metrics.json").read_text())["eval"]["generation"]["images"]["used"] == 8
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 8 and all(p["prediction"] for p in predictions)
    assert all(p["prompt"][1]["image"].endswith(".jpg") for p in predictions)
    answers = {
        a["id"]: a["conversations"][1]["answer"]
        for test_set in ("in", "out")
        for path in (out / "answers" / test_set).glob("*_test.json")
        for a in json.loads(path.read_text())
    }
    assert answers == {p["id"]: p["prediction"] for p in predictions}
    report = (out / "report.md").read_text()
    assert "images shown to the model 8" in report
    assert "Not judged (judge=none)" in report and "evaluator.answers=<this run>/answers" in report
    assert not (out / "reviews").exists()


def test_image_records_are_checked_against_the_model_and_the_probe(compose):
    from rpbench.core.errors import ConfigError
    from rpbench.data.records import EvalExample, Turn
    from rpbench.validate import check_test_images, validate

    pictured = [EvalExample(id="p", prompt=(Turn("user", "Look", image="a.jpg"),), reference="r", task="t")]
    check_test_images(validate(compose("data=sample_mmrole", "model=tiny-qwen2-vl", "evaluator=mmrole")), pictured)
    with pytest.raises(ConfigError, match="model=tiny-qwen2 is text-only.*data.images=drop"):
        check_test_images(validate(compose("data=sample_mmrole", "evaluator=mmrole")), pictured)
    with pytest.raises(ConfigError, match="probe=topk_freq renders text only"):
        check_test_images(validate(compose("data=sample_mmrole", "model=tiny-qwen2-vl", "probe=topk_freq")), pictured)
