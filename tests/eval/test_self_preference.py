"""A judge of the policy's family measured against the judges of other families on the same sessions
(rpbench.eval.benchmarks.conversation.self_preference): the per-session excess by hand, its paired bootstrap CI
against an exact enumeration of the resamples, the cases it cannot be measured, and a run with scripted judges of
two families on 127.0.0.1 (metrics.json, report.md, the warning; pairwise win rates)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from stub_endpoints import stub_judge

from rpbench.eval.benchmarks.conversation.self_preference import of_run, preference_warnings, self_preference
from rpbench.scoring.judge.parties import Party

BOOTSTRAP = {"n_resamples": 20000, "confidence": 0.95, "seed": 0, "method": "percentile"}
NONE = {"a": None, "b": None}
# three judges, four sessions: q of the policy's family; l and g not
BY_JUDGE = {
    "q": [{"a": 5, "b": 4}, {"a": 3, "b": 3}, NONE, {"a": 4, "b": 2}],
    "l": [{"a": 4, "b": 4}, {"a": 2, "b": 1}, {"a": 3, "b": 3}, NONE],
    "g": [{"a": 3, "b": 2}, {"a": 2, "b": 3}, {"a": 1, "b": 1}, {"a": 4, "b": 4}],
}


def test_the_excess_is_the_family_judges_score_minus_the_other_families_mean_per_session():
    found = self_preference(BY_JUDGE, ["q"], ["a", "b"], BOOTSTRAP)["q"]
    d = found["dimensions"]
    assert found["measured"] and found["against"] == ["l", "g"]
    # a: 5 - (4+3)/2 = 1.5, 3 - (2+2)/2 = 1, session 3 without q, 4 - 4 (g alone) = 0
    assert d["a"]["delta"] == pytest.approx(2.5 / 3) and (d["a"]["n"], d["a"]["n_missing"]) == (3, 1)
    # b: 4 - 3 = 1, 3 - 2 = 1, 2 - 4 = -2
    assert d["b"]["delta"] == pytest.approx(0)
    # overall: q 4.5, 3, 3 against the mean of l's and g's overall: (4 + 2.5)/2, (1.5 + 2.5)/2, 4
    assert d["overall"]["delta"] == pytest.approx((1.25 + 1 - 1) / 3)


def test_another_judge_of_the_policys_family_is_no_reference():
    by_judge = {"q": [{"a": 5}, {"a": 4}], "q2": [{"a": 1}, {"a": 1}], "l": [{"a": 3}, {"a": 3}]}
    found = self_preference(by_judge, ["q", "q2"], ["a"], BOOTSTRAP)
    assert found["q"]["against"] == ["l"] and found["q"]["dimensions"]["a"]["delta"] == pytest.approx(1.5)
    assert found["q2"]["dimensions"]["a"]["delta"] == pytest.approx(-2)


def test_the_ci_matches_the_exact_bootstrap_distribution_of_the_mean_excess():
    """Five sessions, one judge of each family: the percentile CI of 20000 resamples against the quantiles of
    all 5^5 equally likely resamples of the per-session differences."""
    mine, theirs = [5, 4, 4, 2, 5], [3, 4, 2, 3, 3]
    by_judge = {"q": [{"a": v} for v in mine], "l": [{"a": v} for v in theirs]}
    found = self_preference(by_judge, ["q"], ["a"], BOOTSTRAP)["q"]["dimensions"]["a"]
    diffs = np.array(mine) - np.array(theirs)
    exact = np.array([diffs[list(i)].mean() for i in itertools.product(range(5), repeat=5)])
    assert found["delta"] == pytest.approx(diffs.mean())
    assert found["ci_low"] == pytest.approx(np.quantile(exact, 0.025), abs=0.2 + 1e-9)  # one resample step: 0.2
    assert found["ci_high"] == pytest.approx(np.quantile(exact, 0.975), abs=0.2 + 1e-9)


def test_without_a_judge_of_another_family_or_a_shared_session_nothing_is_measured():
    alone = self_preference({"q": BY_JUDGE["q"]}, ["q"], ["a", "b"], BOOTSTRAP)["q"]
    assert alone == {"measured": False, "against": [], "reason": "no judge of another family scored the sessions"}
    apart = {"q": [{"a": 4}, {"a": None}], "l": [{"a": None}, {"a": 3}]}
    found = self_preference(apart, ["q"], ["a"], BOOTSTRAP)["q"]
    assert not found["measured"] and "no session has a verdict of both" in found["reason"]
    assert "could not be measured" in preference_warnings({"q": found}, "qwen", "scores")[0]
    assert preference_warnings({"q": alone}, "qwen", "scores") == []  # the startup warning said so


def test_the_family_is_read_from_the_judges_models_and_the_warning_shows_the_ci():
    parties = [Party("judge 0", "e", "Qwen2.5-7B"), Party("judge 1", "e", "llama-3-8b"), Party("judge 2", "e", "g2")]
    found = of_run(dict(BY_JUDGE), None, parties, ("qwen2", "tiny-qwen2"), ["a", "b"], BOOTSTRAP)
    o = found["scores"]["q"]["dimensions"]["overall"]
    assert found["family"] == "qwen" and list(found["scores"]) == ["q"] and "win_rates" not in found
    assert found["warnings"] == [
        f"judge q is of the policy's family (qwen): it scores this run {o['delta']:+.2f} [{o['ci_low']:+.2f}, "
        f"{o['ci_high']:+.2f}] above the other judges (on the 1-5 scale, overall: mean over 3 sessions of its score "
        "minus the other families' judges' mean, paired bootstrap CI; 1 sessions without both)"
    ]
    assert of_run(dict(BY_JUDGE), None, parties, ("gemma2", "tiny-gemma2"), ["a"], BOOTSTRAP) is None


# the rubric of conf/evaluator/common/conversation_session.yaml
NAMES = (
    "character_consistency",
    "persona_drift",
    "knowledge_boundary",
    "out_of_character",
    "engagement",
    "goal_progress",
)
SCORES = {"qwen-judge": {"Mara": 5, "Bertram": 4}, "llama-judge": {"Mara": 4, "Bertram": 2}}


def reply(body: dict) -> str:
    """The user simulator (the judge group's model) asks on; each judge scores by SCORES."""
    text = json.dumps(body["messages"])
    if body["model"] not in SCORES:
        return "Tell me more, please."
    score = SCORES[body["model"]]["Mara" if "Mara Voss" in text else "Bertram"]
    return json.dumps({"scores": dict.fromkeys(NAMES, score), "breaks": []})


@pytest.mark.slow
def test_a_run_judged_by_two_families_reports_the_family_judges_measured_self_preference(
    tmp_path, chat_stub, run_in_process
):
    """The tiny qwen2 policy, the sample's first three sessions (Mara, Mara, Bertram), one turn each: qwen-judge
    scores them 5, 5, 4 and llama-judge 4, 4, 2, so qwen-judge's excess is 1, 1, 2 on every dimension."""
    with chat_stub(reply) as stub:
        out = tmp_path / "run"
        run = run_in_process(
            out,
            "objective=none",
            "logger=none",
            "data=sample_conversation",
            "data.max_test_samples=3",
            "evaluator=conversation",
            "evaluator.max_turns=1",
            "evaluator.drift.enabled=false",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.bootstrap.n_resamples=200",
            "evaluator.judges=[{model: qwen-judge}, {model: llama-judge}]",
            *stub_judge(stub.url),
            "judge.max_retries=0",
        )
    sp = run["eval"]["conversation"]["self_preference"]
    found = sp["scores"]["0:qwen-judge"]
    assert sp["family"] == "qwen" and found["against"] == ["1:llama-judge"]
    for key in (*NAMES, "overall"):
        assert found["dimensions"][key]["delta"] == pytest.approx(4 / 3) and found["dimensions"][key]["n"] == 3
    o = found["dimensions"]["overall"]
    assert (o["ci_low"], o["ci_high"]) == (1.0, 2.0)  # resampled means of 1, 1, 2 lie in [1, 2]; both ends are likely
    stated = "it scores this run +1.33 [+1.00, +2.00] above the other judges"
    metrics = json.loads((out / "metrics.json").read_text())
    assert any(stated in w for w in metrics["warnings"])
    assert any("self-preference on these sessions is measured" in w for w in metrics["warnings"])  # at startup
    report = (out / "report.md").read_text()
    assert stated in report and "Self-preference of `0:qwen-judge` (of the policy's family) in scores" in report
    assert "| overall | +1.33 [+1.00, +2.00] (n=3) |" in report


@pytest.mark.slow
def test_the_family_judges_excess_in_pairwise_win_rates(chat_stub, judge_config):
    """Two sessions, this run's "good" and the other's "bad": qwen-j picks the good one, llama-j calls a tie, so
    qwen-j's win rate for this run is 1 against 0.5 on both sessions: an excess of 0.5."""
    from rpbench.eval.benchmarks.conversation.pairwise import judge_pairwise
    from rpbench.scoring.chat.client import open_client

    def session(sid: str, text: str) -> dict:
        scenario = {"character": "X", "card": "c", "persona": "p", "goal": "g", "ended_by": "turn_limit"}
        return {"id": sid, **scenario, "messages": [{"role": "character", "text": text}]}

    mine = [session("s1", "good"), session("s2", "good")]
    other = {s["id"]: session(s["id"], "bad") for s in mine}

    def pick(body: dict) -> str:
        first = body["messages"][-1]["content"].split("Conversation A:", 1)[1].split("Conversation B:", 1)[0]
        better = ("A" if "good" in first else "B") if body["model"] == "qwen-j" else "tie"
        return json.dumps({"x": better})

    compared = {}
    with chat_stub(pick) as stub:
        for model in ("qwen-j", "llama-j"):
            with open_client(judge_config(base_url=stub.url, model=model, max_retries=0)) as client:
                compared[model] = judge_pairwise(client, mine, other, {"x": "In role?"}, 32, BOOTSTRAP, set())[1]
    parties = [Party("judge 0", "e", "qwen-j"), Party("judge 1", "e", "llama-j")]
    scores = {"qwen-j": [{"x": 4}, {"x": 4}], "llama-j": [{"x": 4}, {"x": 3}]}
    found = of_run(scores, compared, parties, ("qwen2", "tiny-qwen2"), ["x"], BOOTSTRAP)
    rates = found["win_rates"]["qwen-j"]["dimensions"]
    assert rates["x"]["delta"] == 0.5 and rates["overall"]["n"] == 2
    assert found["scores"]["qwen-j"]["dimensions"]["x"]["delta"] == 0.5
    assert "gives this run a win rate +0.50 [+0.50, +0.50] above the other judges (in win rate" in found["warnings"][1]
