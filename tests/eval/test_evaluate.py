"""`python run.py evaluator=...` end to end: generation, metrics, judge, resume, MMRole files, comparison.

The killed generation is `python run.py` in a subprocess; the other runs are what run.py runs, in-process
(``run_in_process``). (The W&B prediction table: tests/test_wandb.py.)"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from rpbench.core.paths import CONF_DIR
from rpbench.serve.running import serve_in_thread
from rpbench.validate import validate

REPO_ROOT = Path(__file__).resolve().parents[2]

RUBRIC_NAMES = [
    "knowledge_boundary.within",
    "knowledge_boundary.outside",
    "role_style",
    "nested",
    "multi_turn.answerable",
    "multi_turn.unanswerable",
    "prioritized",
]
SAMPLE_TEST = REPO_ROOT / "rpbench" / "resources" / "sample" / "rolemrc" / "test.jsonl"

SMALL = ["objective=none", "trainer.enable_progress_bar=false", "evaluator.metrics=[bleu,rougeL,meteor]"]


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.wordnet
def test_rolemrc_evaluation_with_the_local_judge_writes_predictions_metrics_and_report(tmp_path, run_in_process):
    """The tiny random local judge answers no rubric's format: the run writes everything, marks itself failed
    (its judged results rest on nothing) and exits with RunFailed."""
    from rpbench.pipeline import RunFailed

    out = tmp_path / "run"
    with pytest.raises(RunFailed, match=r"none of the \d+ judgements gave a verdict"):
        run_in_process(
            out,
            *SMALL,
            "evaluator=rolemrc",
            "judge=local",
            "data.max_test_samples=8",
            "evaluator.generation.max_new_tokens=8",
            f"paths.output_root={tmp_path}",
        )
    predictions = lines(out / "predictions.jsonl")
    assert len(predictions) == 8 and all("prediction" in p for p in predictions)
    metrics = json.loads((out / "metrics.json").read_text())["eval"]
    overall = metrics["metrics"]["overall"]
    # BLEU of a prediction without tokens has no value (the released evaluation divides by zero): counted
    without = metrics["metric_conventions"]["bleu_empty"]["samples_without_value"]
    assert set(overall) == {"bleu", "rougeL", "meteor"} and overall["bleu"]["n"] + without == 8
    # one judgement per rubric of each record's label, counted from the raw file and the data config's table
    table = OmegaConf.load(CONF_DIR / "data" / "rolemrc.yaml").task_dimensions
    raw = lines(SAMPLE_TEST)[:8]
    assert metrics["judge"]["overall"]["n"] == sum(len(table[r["task"]]) for r in raw)
    judgements = lines(out / "judgements.jsonl")
    assert [sorted(j["verdicts"]) for j in judgements] == [sorted(table[r["task"]]) for r in raw]
    report = (out / "report.md").read_text()
    judge_section = report[report.index("### Judge") :]
    overall_row = next(line for line in judge_section.splitlines() if line.startswith("| overall |"))
    tally = metrics["judge"]["overall"]
    assert f"| {tally['judged']} / {tally['n']} | {tally['parse_failures']} |" in overall_row
    assert (tmp_path / "judge_cache.sqlite").exists()
    assert metrics["failed"].endswith("the results rest on nothing") and metrics["endpoints"]["judge"]["warning"]


@pytest.mark.slow
def test_killed_generation_resumes_where_it_stopped(tmp_path, offline_env, run_in_process):
    out, total = tmp_path / "run", 12
    args = [
        *SMALL,
        "evaluator=rolemrc",
        f"data.max_test_samples={total}",
        "evaluator.generation.batch_size=1",
        "evaluator.generation.max_new_tokens=128",
        "evaluator.metrics=[bleu]",
    ]
    process = subprocess.Popen(
        [sys.executable, "run.py", f"hydra.run.dir={out}", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **offline_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    predictions = out / "predictions.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not predictions.exists() or len(predictions.read_text().splitlines()) < 3):
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done_before = len(lines(predictions))
    assert 3 <= done_before < total, "the run must be killed mid-generation"
    run_in_process(out, *args)
    generation = json.loads((out / "metrics.json").read_text())["eval"]["generation"]
    assert generation["n_resumed"] >= done_before - 1  # a line cut by the kill is regenerated
    assert generation["n_resumed"] + generation["n_generated"] == generation["n_total"] == total
    ids = [p["id"] for p in lines(predictions)]
    assert len(ids) == len(set(ids)) == total


def test_mmrole_reviews_folder_is_aggregated_into_the_official_csvs_without_a_model(tmp_path, run_in_process):
    out = tmp_path / "run"
    release = REPO_ROOT / "rpbench" / "resources" / "mmrole_release"  # the bundled subset of the MMRole release
    reviews = release / "in-test_reviews" / "qwen-vl-chat"
    run_in_process(
        out,
        "objective=none",
        "evaluator=mmrole",
        "data=mmrole",
        f"evaluator.reviews={reviews}",
        "model.name_or_path=does/not-exist",
    )
    official = release / "in-test_results" / "qwen-vl-chat"
    for name in ("comment_test.csv", "human-role_test.csv", "inter-role_test.csv"):
        ours = list(csv.reader((out / "results" / name).open()))
        theirs = list(csv.reader((official / name).open()))
        assert ours[0] == theirs[0]
        assert [float(x) for x in ours[1]] == pytest.approx([float(x) for x in theirs[1]], abs=1e-9)
    assert "MMRole-Eval" in (out / "report.md").read_text()


@pytest.mark.slow
def test_two_runs_are_compared_with_a_paired_bootstrap(tmp_path, run_in_process):
    common = [*SMALL, "evaluator=rolemrc", "data.max_test_samples=6", "evaluator.generation.max_new_tokens=8"]
    first, second = tmp_path / "a", tmp_path / "b"
    run_in_process(first, *common)
    run_in_process(second, *common, "model.init_seed=1", f"evaluator.compare_to={first}")
    comparison = json.loads((second / "metrics.json").read_text())["eval"]["compare"]
    assert comparison["shared_records"] == 6
    ours = [r["metrics"]["rougeL"] for r in lines(second / "scores.jsonl")]
    theirs = [r["metrics"]["rougeL"] for r in lines(first / "scores.jsonl")]
    assert comparison["rougeL"]["delta"] == pytest.approx(sum(ours) / 6 - sum(theirs) / 6)
    # BLEU has no value for an empty reply (as the released evaluation): only pairs scored in both runs count
    ours, theirs = ([r["metrics"]["bleu"] for r in lines(d / "scores.jsonl")] for d in (second, first))
    both = [(a, b) for a, b in zip(ours, theirs) if a is not None and b is not None]
    assert comparison["bleu"]["n"] == len(both) and comparison["bleu"]["n_missing"] == 6 - len(both)


def test_endpoint_backend_through_rpbench_serve_matches_local_generation(tmp_path, run_in_process):
    """rpbench.serve from a thread (its command line: tests/test_serve.py)."""
    common = [
        *SMALL,
        "evaluator=rolemrc",
        "data.max_test_samples=6",
        "evaluator.generation.max_new_tokens=12",
        "evaluator.metrics=[bleu]",
    ]
    with serve_in_thread("tiny-qwen2") as served:
        run_in_process(
            tmp_path / "remote",
            *common,
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={served.base_url}",
            f"evaluator.endpoint.model={served.server.name}",
        )
    run_in_process(tmp_path / "local", *common)
    by_id = lambda d: {p["id"]: p["prediction"] for p in lines(tmp_path / d / "predictions.jsonl")}
    assert by_id("remote") == by_id("local") and len(by_id("local")) == 6


@pytest.fixture(scope="module")
def capturing_judge(chat_stub):
    """A judge stub that keeps every request and answers "1"."""

    def capturing_judge():
        return chat_stub(lambda body: "1")

    return capturing_judge


# A clone of the RoleMRC repository as prompts.source reads it: its judge file's five templates (text written
# for this test, the authors' variable names and slots).
FAKE_LLM_JUDGE = """
KNOWLEDGE_RANGE = \"\"\"[knowledge] {conversations} [reply] {response} [range] {range}\"\"\"
STYLE_COMPLIANCE = \"\"\"[style] {conversations} [reply] {response}\"\"\"
NESTED_INSTRUCTION = \"\"\"[nested] {content} {conversations} [reply] {response} [rule again] {content}\"\"\"
MULTI_TURN_INSTRUCTION = \"\"\"[multi] {conversations} [reply] {response} [type] {type}\"\"\"
INSTRUCTION_PRIORITY = \"\"\"[priority] {conversations} [reply] {response}\"\"\"
"""


@pytest.mark.slow
@pytest.mark.parametrize("prompt_file", [False, True, "released"], ids=["rpbench_rubrics", "prompt_file", "released"])
def test_no_reference_text_reaches_the_judge(compose, tmp_path, prompt_file, capturing_judge):
    import rpbench.pipeline as pipeline

    overrides = [
        "objective=none",
        "logger=none",
        "evaluator=rolemrc",
        "evaluator.metrics=[rougeL]",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.bootstrap.n_resamples=10",
        "judge=openai",
        "judge.api_key_env=null",
        "judge.progress=false",
        f"judge.cache_path={tmp_path / 'judge.sqlite'}",
    ]
    if prompt_file == "released":
        (tmp_path / "clone" / "evaluation").mkdir(parents=True)
        (tmp_path / "clone" / "evaluation" / "llm_judge.py").write_text(FAKE_LLM_JUDGE)
        overrides.append(f"prompts.source={tmp_path / 'clone'}")
    elif prompt_file:
        templates = {r: "{transcript}\n[reply] {response}\n[rule-free]" for r in RUBRIC_NAMES}
        templates["nested"] = "{transcript}\n[reply] {response}\n[rule] {rule}"
        (tmp_path / "prompts.yaml").write_text(json.dumps({"system": None, "rubrics": templates}))
        overrides.append(f"evaluator.judge_prompt_file={tmp_path / 'prompts.yaml'}")
    # each reference marked (the sample reuses some reference texts as earlier turns of other records' prompts)
    raw = lines(SAMPLE_TEST)
    marked = [{**r, "reference": f"{r['reference']} REFERENCE-{i}-ONLY"} for i, r in enumerate(raw)]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in marked))
    overrides.append(f"data.files.test={tmp_path / 'test.jsonl'}")
    with capturing_judge() as judge:
        cfg = compose(*overrides, f"judge.base_url={judge.url}")
        with open_dict(cfg):
            del cfg["hydra"]
            cfg.paths.output_dir = str(tmp_path / "run")
        pipeline.run(validate(cfg))
    table = OmegaConf.load(CONF_DIR / "data" / "rolemrc.yaml").task_dimensions
    assert len(judge.requests) == sum(len(table[r["task"]]) for r in raw) == 80
    sent = "\n".join(m["content"] for body in judge.requests for m in body["messages"])
    assert "REFERENCE-" not in sent
    for record in raw:  # control: what the judge should see does reach it
        assert record["question"][0]["content"] in sent and record["question"][-1]["content"] in sent
    assert all(len(body["messages"]) == (1 if prompt_file else 2) for body in judge.requests)
    evaluation = json.loads((tmp_path / "run" / "metrics.json").read_text())["eval"]
    judged = evaluation["judge"]
    assert judged["overall"]["accuracy"] == 1.0
    if prompt_file == "released":  # the clone's templates, each recorded with its sha256
        texts = {
            name: line.split('"""')[1]
            for line in FAKE_LLM_JUDGE.strip().splitlines()
            for name in [line.split(" = ")[0]]
        }
        recorded = evaluation["prompts"]["rolemrc_judge.knowledge_range"]
        assert recorded == {
            "origin": "evaluation/llm_judge.py:KNOWLEDGE_RANGE",
            "sha256": hashlib.sha256(
                texts["KNOWLEDGE_RANGE"].replace("{conversations}", "{transcript}").encode()
            ).hexdigest(),
        }
        assert len(evaluation["prompts"]) == 5 and "[range] within" in sent and "[range] outside" in sent
        assert "[type] answerable" in sent and "[type] unanswerable" in sent and "[rule again] " in sent
    else:
        assert all(entry["origin"] in ("rpbench", "file:prompts.yaml") for entry in evaluation["prompts"].values())
    assert list(judged["dimensions"]) == ["knowledge_boundary", "role_style", "nested", "multi_turn", "prioritized"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "| Knowledge Boundary | 100.00% [100.00%, 100.00%] | 24 / 24 | 0 | 0 |" in report  # 6 labels x 4 records
    assert (tmp_path / "run" / "score_chart.png").is_file() and "![judge accuracy (%) per group" in report
