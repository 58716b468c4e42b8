"""evaluator=general: lm-eval's tasks on the run's model, through lm-eval's custom-task mechanism on small
local data files (offline), checked against the tiny model's own log-likelihoods."""

from __future__ import annotations

import json
import os

import pytest
import torch

QUESTIONS = [
    {"question": "The sky on a clear day is", "choices": ["blue", "green", "loud"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["three", "four", "seven"], "answer": 1},
    {"question": "Water freezes when it is", "choices": ["hot", "boiling", "cold"], "answer": 2},
    {"question": "A cat says", "choices": ["meow", "moo", "quack"], "answer": 0},
    {"question": "The opposite of up is", "choices": ["left", "down", "over"], "answer": 1},
]


@pytest.fixture
def tasks(tmp_path, monkeypatch, write_task):
    """Two custom lm-eval tasks over local JSONL files, and the overrides that run them."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "tasks"
    for name, rows in (("rpb_mc_a", QUESTIONS), ("rpb_mc_b", QUESTIONS[::-1][:4])):
        write_task(folder, name, rows)
    return [
        "objective=none",
        "logger=none",
        "evaluator=general",
        f"evaluator.include_path={folder}",
        "evaluator.include_defaults=false",
        "evaluator.tasks=[{label: A, name: rpb_mc_a, num_fewshot: 0, metric: 'acc,none'},"
        "{label: B, name: rpb_mc_b, num_fewshot: 1, metric: 'acc,none'}]",
        "evaluator.bootstrap.n_resamples=50",
        "evaluator.batch_size=2",
    ]


@pytest.fixture(scope="module")
def peer_accuracy(composed):
    """Each question's accuracy from the tiny model's summed log-probabilities of each choice (0-shot)."""

    def peer_accuracy(model_name: str, rows, *overrides: str) -> list[float]:
        from rpbench.models.loading import load_model, load_tokenizer
        from rpbench.validate import validate

        spec = validate(composed(os.devnull, f"model={model_name}", *overrides)).model
        tokenizer = load_tokenizer(spec)
        model = load_model(spec, tokenizer).eval()
        out = []
        for row in rows:
            context = tokenizer(row["question"], add_special_tokens=False).input_ids
            scores = []
            for choice in row["choices"]:
                whole = tokenizer(row["question"] + " " + choice, add_special_tokens=False).input_ids
                with torch.no_grad():
                    logits = model(torch.tensor([whole])).logits[0].log_softmax(-1)
                scores.append(sum(float(logits[i - 1, whole[i]]) for i in range(len(context), len(whole))))
            out.append(float(max(range(len(scores)), key=scores.__getitem__) == row["answer"]))
        return out

    return peer_accuracy


@pytest.mark.slow
def test_general_scores_lm_eval_tasks_on_the_loaded_model(tasks, tmp_path, run_in_process, peer_accuracy):
    run = tmp_path / "run"
    results = run_in_process(run, *tasks)["eval"]
    a = results["general"]["rpb_mc_a"]
    expected = peer_accuracy("tiny-qwen2", QUESTIONS)
    rows = [r for r in map(json.loads, (run / "scores.jsonl").open()) if r["task"] == "rpb_mc_a"]
    assert sorted(r["metrics"]["acc,none"] for r in rows) == sorted(expected)
    assert a["summary"]["mean"] == pytest.approx(sum(expected) / len(expected))
    assert a["lm_eval_value"] == pytest.approx(a["summary"]["mean"]) and a["n_documents"] == 5
    assert results["general"]["rpb_mc_b"]["num_fewshot"] == 1 and results["general"]["rpb_mc_b"]["n_documents"] == 4
    assert a["summary"]["ci_low"] <= a["summary"]["mean"] <= a["summary"]["ci_high"]
    metrics = json.loads((run / "metrics.json").read_text())["eval"]
    assert set(metrics["metrics"]["overall"]) == {"rpb_mc_a", "rpb_mc_b"}
    report = (run / "report.md").read_text()
    assert "General benchmarks" in report and "`rpb_mc_b`" in report
    written = sorted(p.name for p in (run / "general").iterdir())
    assert written == ["rpb_mc_a.fingerprint.json", "rpb_mc_a.json", "rpb_mc_b.fingerprint.json", "rpb_mc_b.json"]

    # a rerun resumes both tasks from their files
    again = run_in_process(run, *tasks)["eval"]
    assert again["resumed_tasks"] == ["rpb_mc_a", "rpb_mc_b"]
    assert again["general"] == results["general"]

    # another model in the same folder: the earlier results are moved aside, not reported as its own
    other = run_in_process(run, *tasks, "model.init_seed=1")["eval"]
    assert other["resumed_tasks"] == []
    assert other["set_aside"]["rpb_mc_a"] == {"file": "rpb_mc_a.1.json", "differs": ["model.weights_sha256"]}
    assert (run / "general" / "rpb_mc_a.1.json").is_file()


@pytest.mark.slow
def test_general_delta_is_the_mean_gap_to_the_starting_point(tasks, tmp_path, run_in_process, peer_accuracy):
    start = run_in_process(tmp_path / "start", *tasks, "model.init_seed=1")["eval"]["general"]
    tuned = run_in_process(tmp_path / "tuned", *tasks, f"evaluator.compare_to={tmp_path / 'start'}")["eval"]
    delta = tuned["general_delta"]
    gaps = {n: 100 * (tuned["general"][n]["summary"]["mean"] - start[n]["summary"]["mean"]) for n in start}
    assert {n: t["delta"] for n, t in delta["tasks"].items()} == pytest.approx(gaps)
    assert delta["mean_delta"] == pytest.approx(sum(gaps.values()) / 2)
    # the gap on task A, from the two tiny models' own log-likelihoods
    peer_gap = sum(peer_accuracy("tiny-qwen2", QUESTIONS)) - sum(
        peer_accuracy("tiny-qwen2", QUESTIONS, "model.init_seed=1")
    )
    assert delta["tasks"]["rpb_mc_a"]["delta"] == pytest.approx(100 * peer_gap / len(QUESTIONS)) != 0
    assert delta["tasks"]["rpb_mc_a"]["shared_documents"] == 5 and delta["tasks_not_compared"] == []
    assert "General Δ against" in (tmp_path / "tuned" / "report.md").read_text()


def test_an_unknown_task_is_named(tasks, tmp_path, run_in_process):
    with pytest.raises(Exception, match="no_such_task"):
        run_in_process(
            tmp_path / "run",
            *tasks,
            "evaluator.tasks=[{label: X, name: no_such_task, num_fewshot: 0, metric: 'acc,none'}]",
        )


@pytest.mark.slow
def test_the_endpoint_backend_scores_as_the_local_one(tasks, tmp_path, run_in_process, peer_accuracy):
    """backend=endpoint: lm-eval's local-completions against rpbench.serve (echo + logprobs on
    /v1/completions) gives the loglikelihood accuracy backend=local gives on the same model."""
    from rpbench.serve.model import load_served_model
    from rpbench.serve.running import serve_in_thread

    served = load_served_model("tiny-qwen2")
    served.tokenizer.save_pretrained(tmp_path / "tokenizer")
    with serve_in_thread(served) as server:
        remote = run_in_process(
            tmp_path / "endpoint",
            *tasks,
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={server.base_url}",
            f"evaluator.endpoint.model={server.model_name}",
            f"evaluator.endpoint.tokenizer={tmp_path / 'tokenizer'}",
            "evaluator.endpoint.concurrency=2",
        )["eval"]["general"]
        assert server.stats.requests > 0
    local = run_in_process(tmp_path / "local", *tasks)["eval"]["general"]
    expected = peer_accuracy("tiny-qwen2", QUESTIONS)
    assert remote["rpb_mc_a"]["summary"]["mean"] == local["rpb_mc_a"]["summary"]["mean"] == sum(expected) / 5
    assert remote["rpb_mc_b"]["summary"]["mean"] == local["rpb_mc_b"]["summary"]["mean"]
    rows = {
        name: sorted((r["id"], r["metrics"]) for r in map(json.loads, (tmp_path / name / "scores.jsonl").open()))
        for name in ("endpoint", "local")
    }
    assert rows["endpoint"] == rows["local"]
