"""evaluator=conversation with checked simulators: a scripted user simulator on 127.0.0.1 (judge=local's server,
tests/scripted_server.py) that answers as the character in one scenario and copies its hidden goal in another is
caught, those sessions are flagged, not judged and left out of the headline; a clean one is judged. An evaluated
model's endpoint failing a request ends that session as policy_error (cut short), replayed so on resume."""

from __future__ import annotations

import json

import pytest
from stub_endpoints import stub_judge

VERDICT = json.dumps(
    {
        "scores": dict.fromkeys(
            [
                "character_consistency",
                "persona_drift",
                "knowledge_boundary",
                "out_of_character",
                "engagement",
                "goal_progress",
            ],
            4,
        ),
        "breaks": [],
    }
)
# The simulator prompt says "Who you are: <persona>"; the judge's prompt opens "You are judging".
REPLIES = {
    "You are judging": VERDICT,
    "Who you are: Tom": "Aye, I'm Mara Voss, and I have kept that lighthouse forty years. Mind the tides, lad.",
    "Who you are: Lena": "I want to get the captain to explain how a smartphone's GPS works.",
    "Who you are: Priya": "Could I take a photo of the loaves on the counter? My readers love village bread.",
}


def lines(path):
    return [json.loads(line) for line in path.open()]


@pytest.mark.slow
def test_a_role_reversing_or_leaking_simulator_is_caught_and_left_out_of_the_headline(
    tmp_path, run_in_process, scripted_judge
):
    out = tmp_path / "run"
    overrides = (
        "objective=none",
        "logger=none",
        "data=sample_conversation",
        "evaluator=conversation",
        "data.max_test_samples=3",
        "evaluator.max_turns=2",
        "evaluator.generation.max_new_tokens=4",
        "evaluator.drift.enabled=false",
        "evaluator.bootstrap.n_resamples=10",
        "judge=local",
        "judge.cache_path=null",
        "judge.progress=false",
    )
    results = run_in_process(out, *overrides, local_judge_server=scripted_judge(replies=REPLIES))["eval"]
    checked = {row["id"]: row for row in lines(out / "simulator_checks.jsonl")}
    assert checked["rolemrc-mara-lighthouse"]["failed"] == ["role_reversal"]
    reversal = checked["rolemrc-mara-lighthouse"]["checks"]["role_reversal"]
    assert reversal["value"] == 1 and reversal["turns"][0]["reasons"][0] == "claims_name"
    # "get the captain to explain how a smartphone's gps works": 10 of the goal's words in a row
    assert checked["rolemrc-mara-phone"]["failed"] == ["goal_leak"]
    assert checked["rolemrc-mara-phone"]["checks"]["goal_leak"]["value"] == 10
    clean = checked["mmrole-bertram-bread"]
    assert clean["failed"] == [] and clean["checks"]["persona_adherence"]["value"] > 0.1
    judgements = {row["id"]: row for row in lines(out / "judgements.jsonl")}
    assert judgements["rolemrc-mara-lighthouse"]["status"] == "simulator_check"
    assert (
        judgements["rolemrc-mara-phone"]["status"] == "simulator_check" and judgements["mmrole-bertram-bread"]["reply"]
    )
    c = results["conversation"]
    assert c["judge"]["overall"]["mean"] == 4.0 and c["judge"]["overall"]["n"] == 1  # the clean session alone
    checks = c["simulator_checks"]
    assert checks["sessions_failed"] == 2 and checks["checks"]["role_reversal"] == {
        "checked": 3,
        "failed": 1,
        "mean_value": pytest.approx(1 / 3),
    }
    assert checks["checks"]["goal_leak"]["failed"] == 1 and checks["checks"]["double_user_turn"]["failed"] == 0
    assert results["judge_tally"]["n"] == 1
    report = (out / "report.md").read_text()
    assert "2 sessions failed a simulator check (role_reversal 1, goal_leak 1) (not judged)" in report
    assert "| role_reversal | 3 | 1 | 0.333 |" in report

    # the two failing sessions alone: nothing is judged, and the failed run says why
    from rpbench.pipeline import RunFailed

    alone = tmp_path / "alone"
    with pytest.raises(RunFailed) as failed:
        run_in_process(
            alone,
            *overrides[:4],
            "data.max_test_samples=2",
            *overrides[5:],
            local_judge_server=scripted_judge(replies=REPLIES),
        )
    assert (
        "none of the 2 sessions was judged: 0 sessions cut short, 2 sessions failed a simulator check (role_reversal "
        "1, goal_leak 1) (simulator_checks.jsonl)" in str(failed.value)
    )


@pytest.mark.slow
def test_a_failed_request_of_the_evaluated_models_endpoint_cuts_that_session_short(tmp_path, chat_stub, run_in_process):
    """The model's endpoint answers every request but turn 2 of Lena's session (HTTP 500, no retries): that session
    ends as policy_error, the other goes on; a resumed run replays it so without asking the model again (the
    judge is asked again: judge.cache_path=null)."""

    def reply(body: dict) -> str | int:
        system, text = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "Stay in character" in system:  # the evaluated model
            turn = sum(m["role"] == "assistant" for m in body["messages"]) + 1
            return 500 if turn == 2 and "GPS" in body["messages"][1]["content"] else "The tides are kind today."
        if "Write only your next message" in text:
            return "Could you tell me more about the lighthouse and its keeper's days?"
        return VERDICT

    def run(out, url):
        return run_in_process(
            out,
            "objective=none",
            "logger=none",
            "data=sample_conversation",
            "data.max_test_samples=2",
            "evaluator=conversation",
            "evaluator.max_turns=3",
            "evaluator.drift.enabled=false",
            "evaluator.simulator_checks=[]",
            "evaluator.bootstrap.n_resamples=10",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={url}",
            "evaluator.endpoint.model=m",
            "evaluator.endpoint.max_retries=0",
            *stub_judge(url),
            "judge.max_retries=0",
            "evaluator.allow_shared_judge=true",
        )["eval"]

    out = tmp_path / "run"
    with chat_stub(reply) as stub:
        c = run(out, stub.url)["conversation"]
        first = len(stub.requests)
        again = run(out, stub.url)["conversation"]  # resumed: nothing is asked again, Lena's session replayed
        asked = stub.requests[first:]
    assert c["sessions_cut_short"] == {"policy_error": 1} and c["ended_by"] == {"policy_error": 1, "turn_limit": 1}
    assert c["judge"]["overall"]["n"] == 1
    lena = {s["id"]: s for s in lines(out / "conversations.jsonl")}["rolemrc-mara-phone"]
    assert lena["n_character_turns"] == 1 and lena["error"].startswith("turn 2: 1 of 2 endpoint requests failed")
    assert again["sessions_cut_short"] == {"policy_error": 1} and again["judge"] == c["judge"]
    assert [r for r in asked if r["model"] == "m"] == []
