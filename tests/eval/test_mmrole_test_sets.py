"""MMRole In-Test and Out-Test side by side (paper Table 5 layout), and the without-vision ablation (Table 6)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rpbench.data.mmrole.prompts import METRICS
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.benchmarks import BENCHMARKS
from rpbench.eval.benchmarks.mmrole.judging import aggregate_review_sets

ITR = "Image-Text Relevance"


def reviewed(rid: str, score: list, **exceptions) -> dict:
    scores = {m: exceptions.get(m, score) for m in METRICS}
    return {"id": rid, "rm_review": {m: {"review": f"[Scores]: {s}", "score": s} for m, s in scores.items()}}


def write(folder: Path, name: str, records: list) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(records), encoding="utf-8")


@pytest.fixture
def review_sets(tmp_path) -> dict[str, Path]:
    """In: 0.8, 1.0 (comment) and 0.9 with ITR 0.6 (human-role); Out: 0.5, and 0.7 with Fluency unparsed."""
    sets = {"in": tmp_path / "in-test_reviews", "out": tmp_path / "out-test_reviews"}
    write(sets["in"], "comment_test.json", [reviewed("i1", [8, 10]), reviewed("i2", [10, 10])])
    write(sets["in"], "human-role_test.json", [reviewed("i3", [9, 10], **{ITR: [6, 10]})])
    write(sets["out"], "comment_test.json", [reviewed("o1", [5, 10]), reviewed("o2", [7, 10], Fluency={})])
    return sets


def test_review_sets_are_aggregated_per_set_and_over_all_records(review_sets):
    results = aggregate_review_sets(review_sets)
    inside, outside, pooled = results["test_sets"]["in"]["all"], results["test_sets"]["out"]["all"], results["all"]
    assert (inside["count"], outside["count"], pooled["count"]) == (3, 2, 5)
    assert inside["means"]["Coherency"] == pytest.approx((0.8 + 1.0 + 0.9) / 3)
    assert inside["means"][ITR] == pytest.approx((0.8 + 1.0 + 0.6) / 3)
    assert inside["overall"] == pytest.approx((7 * 0.9 + 0.8) / 8)
    assert outside["means"]["Fluency"] == pytest.approx(0.5) and outside["parse_failures"]["Fluency"] == 1
    assert outside["overall"] == pytest.approx((7 * 0.6 + 0.5) / 8)
    # all records pooled (the paper's overall), not the mean of the two sets
    assert pooled["means"]["Coherency"] == pytest.approx(3.9 / 5)
    assert pooled["means"][ITR] == pytest.approx(3.6 / 5)
    assert pooled["means"]["Fluency"] == pytest.approx(3.2 / 4)
    assert pooled["overall"] == pytest.approx((6 * 0.78 + 0.72 + 0.8) / 8)
    assert list(results["test_sets"]["in"]["files"]) == ["comment_test", "human-role_test"]


def test_report_puts_in_test_and_out_test_side_by_side(compose, review_sets, tmp_path, evaluation_of):
    reviews = "{" + ",".join(f"{name}:{folder}" for name, folder in review_sets.items()) + "}"
    cfg = compose("data=mmrole", "objective=none", "evaluator=mmrole", f"evaluator.reviews={reviews}")
    out = tmp_path / "run"
    results = BENCHMARKS.get("mmrole").from_files(evaluation_of(cfg, out))
    (section,) = results["report_sections"]
    rows = section.splitlines()
    assert rows[2] == "| test set | n | " + " | ".join(METRICS) + " | overall |"
    assert rows[4:7] == [
        "| In-Test | 3 | 0.9000 | 0.9000 | 0.9000 | 0.8000 | 0.9000 | 0.9000 | 0.9000 | 0.9000 | 0.8875 |",
        "| Out-Test | 2 | 0.6000 | 0.5000 | 0.6000 | 0.6000 | 0.6000 | 0.6000 | 0.6000 | 0.6000 | 0.5875 |",
        "| overall | 5 | 0.7800 | 0.8000 | 0.7800 | 0.7200 | 0.7800 | 0.7800 | 0.7800 | 0.7800 | 0.7750 |",
    ]
    assert "| in/human-role_test | 1 | 0.9000 | 0.9000 | 0.9000 | 0.6000 |" in section
    assert "| out/comment_test | 2 |" in section and rows[-1].endswith(": 1")
    csvs = ["in/comment_test.csv", "in/human-role_test.csv", "out/comment_test.csv"]
    assert results["mmrole_eval"]["csv_files"] == csvs
    row = list(csv.reader((out / "results" / "out" / "comment_test.csv").open()))[1]
    assert [float(x) for x in row] == pytest.approx([2, 0.6, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6])


def examples() -> list[EvalExample]:
    seen = (Turn("system", "Be Ann."), Turn("user", "Look!", image="/data/a.jpg"))
    return [
        EvalExample("a", seen, "Nice.", "comment", {"image": "a.jpg", "test_set": "in"}),
        EvalExample("b", seen[1:], "Hm.", "comment", {"image": "b.jpg", "test_set": "out"}),
        EvalExample("c", (Turn("user", "Hi"),), "Hi.", "human-role", {"image": "c.jpg", "test_set": "out"}),
    ]


def test_without_vision_takes_every_image_out_of_the_prompts(compose, tmp_path, evaluation_of):
    benchmark = BENCHMARKS.get("mmrole")
    vision = ("data=sample_mmrole", "model=tiny-qwen2-vl", "evaluator=mmrole")
    blind_cfg = compose(*vision, "evaluator.without_vision=true")
    blind, changed = benchmark.prepare_examples(evaluation_of(blind_cfg, tmp_path, examples=examples()))
    assert changed == {"without_vision": {"records_with_images_removed": 2}}
    assert [[t.image for t in e.prompt] for e in blind] == [[None, None], [None], [None]]
    assert [e.prompt[-1].content for e in blind] == ["Look!", "Look!", "Hi"] and blind[0].meta["image"] == "a.jpg"
    seeing_cfg = compose(*vision)
    seeing, changed = benchmark.prepare_examples(evaluation_of(seeing_cfg, tmp_path, examples=examples()))
    assert seeing == examples() and changed == {}
    (note,) = benchmark.report_sections({"without_vision": {"records_with_images_removed": 2}})
    assert note.startswith("**Without vision** (MMRole Table 6 ablation)") and "2 test records" in note


def test_reference_metrics_are_grouped_by_test_set():
    groupings = BENCHMARKS.get("mmrole").groupings(examples())
    assert groupings == {"task": ["comment", "comment", "human-role"], "test_set": ["in", "out", "out"]}
    assert BENCHMARKS.get("mmrole").groupings(examples()[:0]) == {"task": []}


@pytest.mark.slow
def test_per_turn_training_then_in_and_out_test_judged_without_vision(tmp_path, chat_stub, run_in_process, repo_root):
    """Trains on the sample's per-turn samples, then evaluates both test sets blind, judged by a stub."""
    out = tmp_path / "run"
    with chat_stub(lambda body: "Both fine. [Scores]: (8, 10)") as judge:
        run_in_process(
            out,
            f"paths.output_root={tmp_path}",
            "data=sample_mmrole",
            "model=tiny-qwen2-vl",  # trains with the images, then answers the test sets without them
            "debug=short",
            "evaluator=mmrole",
            "evaluator.without_vision=true",
            "evaluator.metrics=[bleu]",
            "evaluator.generation.max_new_tokens=4",
            "trainer.enable_progress_bar=false",
            "judge=vllm",
            f"judge.base_url={judge.url}",
            "judge.model=stub",
            "judge.progress=false",
        )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["records"]["test"]["test_set.in"] == 8 and metrics["records"]["test"]["test_set.out"] == 6
    evaluation = metrics["eval"]
    assert evaluation["without_vision"] == {"records_with_images_removed": 14}
    assert set(evaluation["metrics"]["test_set"]) == {"in", "out"}
    without = evaluation["metric_conventions"]["bleu_empty"]["samples_without_value"]  # no tokens: no BLEU
    assert sum(evaluation["metrics"]["test_set"][s]["bleu"]["n"] for s in ("in", "out")) + without == 14
    sets = evaluation["mmrole_eval"]["test_sets"]
    assert (sets["in"]["all"]["count"], sets["out"]["all"]["count"]) == (8, 6)
    assert evaluation["mmrole_eval"]["all"]["overall"] == pytest.approx(0.8)
    assert len(judge.requests) == 14 * len(METRICS)
    assert sorted(p.name for p in (out / "answers" / "out").iterdir()) == [
        "comment_test.json",
        "human-role_test.json",
        "inter-role_test.json",
    ]
    report = (out / "report.md").read_text()
    assert "**Without vision**" in report and "### Reference metrics per test set" in report
    assert "| In-Test | 8 |" in report and "| Out-Test | 6 |" in report and "| overall | 14 |" in report
    assert "test test_set.in: 8, test test_set.out: 6" in report
    for name in ("metrics.json", "report.md"):  # results name no machine path (test sets as configured)
        assert str(repo_root) not in (out / name).read_text(), name
