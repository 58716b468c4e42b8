"""A judged run's cost in metrics.json (requests and tokens, from the endpoint's ``usage``), its estimate, its
agreement with a human ratings file beside its scores, and ``judge.budget`` stopping a run before anything is
generated: real runs against a judge on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rpbench.core.paths import CONF_DIR
from rpbench.data import readers
from rpbench.data.files import package_path
from rpbench.data.readers import NoRubrics
from rpbench.scoring.judge.budget import JudgeBudgetError

REPO_ROOT = Path(__file__).resolve().parents[3]

RUN = [
    "objective=none",
    "logger=none",
    "evaluator=rolemrc",
    "evaluator.metrics=[rougeL]",
    "evaluator.generation.max_new_tokens=2",
    "evaluator.bootstrap.n_resamples=10",
    "data.max_test_samples=3",
    "judge=openai",
    "judge.api_key_env=null",
    "judge.progress=false",
    "judge.cache_path=null",
]


SAMPLE_TEST = REPO_ROOT / "rpbench" / "resources" / "sample" / "rolemrc" / "test.jsonl"
SAMPLE_CHARACTERLLM = package_path("pkg://rpbench/resources/sample/characterllm")


def test_judge_cost_and_agreement_with_humans(tmp_path, data_options, chat_stub, run_in_process, group_values):
    table = OmegaConf.load(CONF_DIR / "data" / "rolemrc.yaml").task_dimensions
    records = readers.read("rolemrc", "test", SAMPLE_TEST, data_options("sample")).examples
    rated = [(r.id, rubric) for r in records for rubric in table[r.task]]
    # humans' majority 1 on even items, 0 on odd ones; the judge says 1 to everything
    humans = [
        {"id": i, "rubric": rubric, "ratings": [1, 1, 0] if n % 2 == 0 else [0, 0, 1]}
        for n, (i, rubric) in enumerate(rated)
    ]
    (tmp_path / "humans.jsonl").write_text("".join(json.dumps(h) + "\n" for h in humans))
    with chat_stub(lambda body: "1") as judge:
        results = run_in_process(
            tmp_path / "run",
            *RUN,
            f"judge.base_url={judge.url}",
            f"evaluator.human_ratings={tmp_path / 'humans.jsonl'}",
        )
        asked = len(judge.requests)
    cost, estimate = results["eval"]["judge_cost"], results["judge_estimate"]
    scored = [json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    rubrics = sum(len(table[row["task"]]) for row in scored)  # one request per rubric of a record's label
    assert cost["requests"] == cost["replies"] == asked == estimate["requests"] == rubrics > 0
    tries = group_values("judge", "openai", "judge")["parse_tries"]  # every reply unparsed: asked this often
    assert tries > 1 and estimate["requests_with_reasks"] == estimate["requests"] * tries == asked + estimate["reasks"]
    # the stub's usage: 1 prompt and 1 completion token per reply
    assert (cost["prompt_tokens"], cost["completion_tokens"]) == (asked, asked)
    assert (
        estimate["completion_tokens"] == asked * group_values("evaluator", "rolemrc", "evaluator")["judge_max_tokens"]
    )
    found = results["eval"]["judge_agreement"]
    judged = [(row["id"], rubric) for row in scored for rubric in row["verdicts"]]
    majority_one = [n % 2 == 0 for n, key in enumerate(rated) if key in set(judged)]
    assert found["n_compared"] == len(judged) == asked and found["n_without_verdict"] == len(rated) - asked
    assert found["accuracy"] == sum(majority_one) / len(majority_one)
    assert "## Judge agreement with human ratings (judge `gpt-4o-mini`)" in (tmp_path / "run" / "report.md").read_text()
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (
        written["rpbench_version"] == results["rpbench_version"]
        and len(written["records"]["test"]["records_sha256"]) == 64
    )


def test_a_run_past_its_judge_budget_does_not_start(tmp_path, chat_stub, run_in_process):
    with chat_stub(lambda body: "1") as judge:
        with pytest.raises(JudgeBudgetError, match=r"tokens \d+ > judge.budget.tokens=10"):
            run_in_process(tmp_path / "run", *RUN, f"judge.base_url={judge.url}", "judge.budget.tokens=10")
        assert judge.requests == []
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


CHARACTERLLM = [
    "objective=none",
    "logger=none",
    "data=sample_characterllm",
    "evaluator=characterllm",
    "evaluator.max_turns=2",
    "evaluator.generation.max_new_tokens=2",
    "evaluator.bootstrap.n_resamples=10",
    "judge=openai",
    "judge.api_key_env=null",
    "judge.progress=false",
    "judge.cache_path=null",
]


@pytest.mark.slow
def test_the_estimate_counts_every_request_of_a_characterllm_run_and_its_reasks_apart(
    tmp_path, chat_stub, run_in_process, group_values
):
    """The interviewer's questions go to the judge's endpoint too; each aspect score, unreadable until its last
    try, is asked judge.parse_tries times (evaluator.judge_reask=true)."""
    tries = group_values("judge", "openai", "judge")["parse_tries"]

    def reply(body: dict) -> str:
        if "Write only your next utterance" in body["messages"][-1]["content"]:  # the interviewer
            return "What do you remember best?"
        return "Fine.\n5" if len(body["messages"]) == 2 * tries else "I cannot rate this."

    with chat_stub(reply) as judge:
        results = run_in_process(
            tmp_path / "run", *CHARACTERLLM, f"judge.base_url={judge.url}", "evaluator.judge_reask=true"
        )
        requests = judge.requests
    estimate = results["judge_estimate"]
    first_asks = [r for r in requests if len(r["messages"]) == 2]  # a re-ask adds the reply and the re-ask
    interviewer = [r for r in first_asks if "Write only your next utterance" in r["messages"][-1]["content"]]
    assert len(interviewer) == 3 * 2 and len(first_asks) - len(interviewer) == 9 * 5  # 3 Turns interviews x 2 turns
    assert estimate["requests"] == len(first_asks)
    assert estimate["reasks"] == 9 * 5 * (tries - 1) and estimate["requests_with_reasks"] == len(requests)
    assert results["eval"]["judge_cost"]["requests"] == len(requests)


@pytest.mark.slow
def test_a_characterllm_estimate_counts_the_chosen_settings_and_reasks_only_when_asked_for(compose):
    from rpbench.eval.benchmarks import BENCHMARKS
    from rpbench.validate import validate

    benchmark = BENCHMARKS.get("characterllm")
    records = readers.read("characterllm", "test", SAMPLE_CHARACTERLLM, NoRubrics(task_dimensions=None)).examples
    local = "judge.base_url=http://127.0.0.1:9/v1"  # asked nothing here
    single = validate(compose(*CHARACTERLLM, local, "evaluator.settings=[single]")).evaluator
    assert sum(benchmark.judge_requests(single, records)) == 6 * 5  # the 3 Turns interviews are not run
    assert sum(benchmark.reaskable_requests(single, records)) == 0  # the authors ask once (judge_reask=false)
    both = validate(compose(*CHARACTERLLM, local, "evaluator.judge_reask=true")).evaluator
    assert sum(benchmark.judge_requests(both, records)) == 9 * 5 + 3 * 2
    assert sum(benchmark.reaskable_requests(both, records)) == 9 * 5
