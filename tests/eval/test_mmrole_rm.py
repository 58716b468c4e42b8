"""`evaluator=mmrole_rm` end to end: reviews generated for the held-out samples, agreement with the reference
judge's score pairs in metrics.json, rm_agreement.json, rm_scores.jsonl and the report; judge=mmrole_rm.
The runs are what `python run.py` runs, in-process (``run_in_process``)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rpbench.core.errors import RpbenchError
from rpbench.data import readers
from rpbench.data.mmrole.prompts import METRICS
from rpbench.data.mmrole.reviews import Heldout, ReviewsOptions
from rpbench.data.mmrole.rm import ReviewerOptions

REPO_ROOT = Path(__file__).resolve().parents[2]

BUNDLED = REPO_ROOT / "rpbench" / "resources" / "mmrole_release" / "rm_reviews"
HELDOUT = {"questions": 2, "models": 2, "seed": 0, "share_questions": False}  # data=sample_mmrole_reviews
TINY = ["model=tiny-qwen2", "trainer=cpu", "trainer.devices=1", "logger=csv", "trainer.enable_progress_bar=false"]


@pytest.mark.slow
def test_agreement_of_reviews_from_an_endpoint_with_the_reference_judge(tmp_path, chat_stub, run_in_process):
    options = ReviewsOptions(
        image_root=None, reference_judge="MMRole-Eval_RM", heldout=Heldout.parse(HELDOUT, "data.heldout")
    )
    held_out = readers.read("mmrole_reviews", "test", BUNDLED, options).examples
    by_prompt = {e.prompt[-1].content: e for e in held_out}

    def review(body):  # exact reference reviews, but Fluency always 5, 10 and Tone Consistency unreadable
        example = by_prompt[body["messages"][-1]["content"]]
        metric = example.meta["metric"]
        # the pair without parentheses: read by default (evaluator.score_parse=authors), as the authors' parser does
        return {"Fluency": "Fine. [Scores]: 5, 10", "Tone Consistency": "No score."}.get(metric, example.reference)

    out = tmp_path / "run"
    with chat_stub(review) as srv:
        run_in_process(
            out,
            "experiment=mmrole_rm_distill",
            *TINY,
            "objective=none",
            "data=sample_mmrole_reviews",
            "data.images=drop",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={srv.url}",
            "evaluator.endpoint.model=stub",
        )
        assert len(srv.requests) == len(held_out) == 32
    found = json.loads((out / "metrics.json").read_text())["eval"]["rm_agreement"]
    assert found == json.loads((out / "rm_agreement.json").read_text())
    per_metric = found["per_metric"]
    assert found["metrics"] == list(METRICS) and found["parse_failures"] == 4
    assert (found["reference_judge"], found["parse_failure"]) == ("MMRole-Eval_RM", "random_score")
    assert found["score_parse"] == "authors"
    assert per_metric["Tone Consistency"]["success_rate"] == 0.0 and found["overall"]["n_scored"] == 28
    ratios = [e.meta["score"][0] / e.meta["score"][1] for e in held_out if e.meta["metric"] == "Fluency"]
    fluency = per_metric["Fluency"]["scored_only"]["ratio"]
    assert fluency["mae"] == pytest.approx(statistics.mean(abs(0.5 - r) for r in ratios))
    assert fluency["rmse"] == pytest.approx(statistics.mean((0.5 - r) ** 2 for r in ratios) ** 0.5)
    for metric in ("Instruction Adherence", "Coherency", "Knowledge Consistency"):
        assert per_metric[metric]["scored_only"]["ratio"]["mae"] == 0.0
        assert per_metric[metric]["ratio"] == per_metric[metric]["scored_only"]["ratio"]
    overall = found["overall"]["scored_only"]["ratio"]["mae"]
    assert overall == pytest.approx(sum(abs(0.5 - r) for r in ratios) / 28)
    rows = [json.loads(line) for line in (out / "rm_scores.jsonl").read_text().splitlines()]
    assert len(rows) == 32 and sum(r["parsed"] is None for r in rows) == 4
    assert all(r["parsed"] == [5.0, 10.0] for r in rows if r["metric"] == "Fluency")
    report = (out / "report.md").read_text()
    assert "## MMRole-Eval reward model: agreement with MMRole-Eval_RM" in report and "GPT-4" not in report
    assert "4 unreadable, seed 0" in report and "| Tone Consistency | 4 | 0.00% |" in report
    assert "Score pairs read as the authors' get_review_score reads it" in report
    # each of the 4 unreadable Tone Consistency reviews counted with a seeded random score in [0, 1)
    tone = [r for r in rows if r["metric"] == "Tone Consistency"]
    assert all(r["parsed"] is None and 0 <= r["score_counted"] < 1 for r in tone)


@pytest.mark.slow
def test_the_papers_recipe_measures_agreement_with_gpt4_on_its_validation_file(tmp_path, chat_stub, run_in_process):
    """experiment=mmrole_reward_model reads GPT-4's evaluations (the RM_data format); a model that writes
    the reference evaluation back agrees exactly, and the report names GPT-4 as the reference judge."""
    options = ReviewerOptions(image_root=None, reference_judge="GPT-4")
    sample = readers.read("mmrole_rm", "test", REPO_ROOT / "rpbench/resources/sample/mmrole_rm/RM-test.json", options)
    sample = sample.examples
    by_prompt = {e.prompt[-1].content: e.reference for e in sample}
    out = tmp_path / "run"
    with chat_stub(lambda body: by_prompt[body["messages"][-1]["content"]]) as srv:
        run_in_process(
            out,
            "experiment=mmrole_reward_model",
            *TINY,
            "objective=none",
            "data=sample_mmrole_rm",
            "data.images=drop",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={srv.url}",
            "evaluator.endpoint.model=stub",
        )
        assert len(srv.requests) == len(sample) == 16
    found = json.loads((out / "metrics.json").read_text())["eval"]["rm_agreement"]
    assert found["reference_judge"] == "GPT-4" and found["parse_failures"] == 0
    prompts = json.loads((out / "metrics.json").read_text())["eval"]["prompts"]
    assert prompts["mmrole_eval.system"]["origin"] == "rpbench" and len(prompts) == 5 + len(METRICS)
    assert found["overall"]["ratio"]["mae"] == 0.0 and found["overall"]["success_rate"] == 1.0
    # the file does not say which model answered: one model, so the paper's alpha (models as cases) is undefined
    assert found["cronbach_alpha"]["queries_as_items"]["model"] == {"alpha": None, "models": 1, "queries": 2}
    assert found["cronbach_alpha"]["metrics_as_items"]["model"]["records"] == 2
    assert "## MMRole-Eval reward model: agreement with GPT-4" in (out / "report.md").read_text()


def test_reward_model_judge_needs_the_model_folder(compose, tmp_path, run_in_process):
    cfg = compose("evaluator=mmrole", "objective=none", "judge=mmrole_rm", f"judge.model={tmp_path}")
    assert cfg.judge.backend == "local" and cfg.judge.server.model.name_or_path == str(tmp_path)
    with pytest.raises(RpbenchError, match="judge.server.model.name_or_path is not set"):  # run.py: exit status 1
        run_in_process(tmp_path / "run", "evaluator=mmrole", "objective=none", "judge=mmrole_rm")


@pytest.mark.slow
def test_train_the_reward_model_then_judge_answers_with_it(tmp_path, run_in_process):
    """experiment=mmrole_reward_model on the bundled RM_data sample (text only, tiny model), then judge=mmrole_rm
    serves its saved model/ as the MMRole-Eval judge, without an endpoint."""
    trained = tmp_path / "rm"
    run_in_process(
        trained,
        "experiment=mmrole_reward_model",
        *TINY,
        "data=sample_mmrole_rm",
        "data.images=drop",
        "debug=short",
        "save_model=true",
        "objective.batch_size=1",
        "objective.grad_accum=1",
        "data.max_length=2048",  # the tiny tokenizer's context; longer samples keep no review token (counted)
        "data.max_prompt_length=1024",
        "evaluator.generation.max_new_tokens=4",
    )
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["train"]["optimizer_steps"] == 3 and metrics["records"]["test"]["read"] == 8
    assert metrics["eval"]["rm_agreement"]["overall"]["n"] == 8  # debug=short: the first 8 held-out samples
    answers = tmp_path / "answers"
    answers.mkdir()
    record = {
        "id": "q1",
        "system": "",
        "image": "COCO/x.jpg",
        "role": "Iron Man",
        "script": "The Avengers",
        "other_role": "a curious human",
        "conversations": [
            {"from": "user", "value": "What do you see?"},
            {"from": "assistant", "value": "A suit of armour.", "answer": "A car."},
        ],
    }
    (answers / "comment_test.json").write_text(json.dumps([record]))
    judged = tmp_path / "judged"
    from rpbench.pipeline import RunFailed

    with pytest.raises(RunFailed, match=r"every request of judge \(\d+ of \d+\) failed"):  # a 3-step tiny RM
        run_in_process(
            judged,
            "evaluator=mmrole",
            "objective=none",
            "logger=csv",
            "judge=mmrole_rm",
            f"judge.model={trained / 'model'}",
            "judge.server.model.family=qwen2",  # the tiny base's family (the default is the experiment's qwen2_vl)
            "~judge.server.model.freeze_vision",
            "judge.multimodal=false",
            "judge.server.model.dtype=float32",
            "evaluator.judge_max_tokens=4",
            f"evaluator.answers={answers}",
        )
    results = json.loads((judged / "metrics.json").read_text())["eval"]
    mmrole = results["mmrole_eval"]  # the RM answered every request (no transport failure); none gave a score
    assert mmrole["judge_stats"]["replies"] >= len(METRICS) and mmrole["judge_stats"]["failures"] == 0
    assert results["endpoints"]["judge"]["failures"] == results["endpoints"]["judge"]["requests"]
    assert mmrole["files"]["comment_test"]["count"] == 1


def test_records_without_a_reference_score_pair_are_refused():
    from rpbench.data.records import EvalExample, Turn
    from rpbench.eval.benchmarks import BENCHMARKS

    record = EvalExample("r1", (Turn("user", "hi"),), "hello", "comment", {})
    with pytest.raises(ValueError, match="test record 'r1' has none .*data=mmrole_rm"):
        BENCHMARKS.get("mmrole_rm").groupings([record])
