"""evaluator.judges for evaluator=conversation: scripted judges on 127.0.0.1 that disagree (per-judge scores,
the ensemble's mean, Krippendorff's alpha by hand), a judge whose replies do not parse (counted, not a 0),
each judge held apart from the user simulator, and the flip rate of position-swapped pairwise verdicts."""

from __future__ import annotations

import json

import pytest
from stub_endpoints import stub_judge

from rpbench.core.errors import ConfigError
from rpbench.validate import validate

# the rubric of conf/evaluator/common/conversation_session.yaml
NAMES = (
    "character_consistency",
    "persona_drift",
    "knowledge_boundary",
    "out_of_character",
    "engagement",
    "goal_progress",
)
DIMENSIONS = len(NAMES)
# judge model -> the score it gives every dimension of the session whose character it names (None: unparsed)
SCORES = {"j1": {"Mara": 4, "Bertram": 2}, "j2": {"Mara": 5, "Bertram": 2}, "j3": {"Mara": 3, "Bertram": None}}


def reply(body: dict) -> str:
    """The user simulator (the judge group's model) asks on; judge jK scores by SCORES, or answers no JSON."""
    text = json.dumps(body["messages"])
    if body["model"] not in SCORES:
        return "Tell me more, please."
    if "Conversation A:" in text:  # pairwise: j1 prefers the first position, j2 sees no difference, j3 no JSON
        choice = {"j1": "A", "j2": "tie", "j3": None}[body["model"]]
        return json.dumps(dict.fromkeys(NAMES, choice)) if choice else "Both are fine."
    score = SCORES[body["model"]]["Mara" if "Mara Voss" in text else "Bertram"]
    if score is None:
        return "I would rather not say."
    return json.dumps({"scores": dict.fromkeys(NAMES, score), "breaks": []})


@pytest.mark.slow
def test_three_judges_score_sessions_agree_by_krippendorffs_alpha_and_flip_pairwise(
    tmp_path, chat_stub, run_in_process
):
    """The sample's first three sessions (Mara, Mara, Bertram), one turn each; j3's replies on Bertram's do not
    parse. Then the same sessions judged pairwise against the first run's: j1 always picks "A"."""
    with chat_stub(reply) as stub:
        out = tmp_path / "run"
        overrides = [
            "objective=none",
            "logger=none",
            "data=sample_conversation",
            "data.max_test_samples=3",
            "evaluator=conversation",
            "evaluator.max_turns=1",
            "evaluator.drift.enabled=false",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.bootstrap.n_resamples=20",
            "evaluator.judges=[{model: j1}, {model: j2}, {model: j3}]",
            *stub_judge(stub.url),
            "judge.max_retries=0",
            "judge.parse_tries=2",
        ]
        run = run_in_process(out, *overrides)
        asked = [r["model"] for r in stub.requests]
        # the same sessions again, compared with the first run's: each judge, both orders
        again = run_in_process(tmp_path / "again", *overrides, f"evaluator.pairwise_with={out}")["eval"]
    assert run["judge_estimate"]["requests"] == 3 * 3  # one turn: no simulator message; each judge, each session
    results = run["eval"]
    c = results["conversation"]
    e = c["ensemble"]
    assert e["judges"] == ["0:j1", "1:j2", "2:j3"] and asked.count("j1") == asked.count("j2") == 3
    assert asked.count("j3") == 3 + 1  # the unparsed session re-asked once (judge.parse_tries=2)
    per = {name: j["scores"]["overall"] for name, j in e["per_judge"].items()}
    # sessions (Mara, Mara, Bertram): j1 4, 4, 2; j2 5, 5, 2; j3 3, 3 and none
    assert per["0:j1"]["mean"] == pytest.approx(10 / 3) and per["1:j2"]["mean"] == pytest.approx(4)
    assert (per["2:j3"]["mean"], per["2:j3"]["n"], per["2:j3"]["n_missing"]) == (3.0, 2, 1)  # left out, not a 0
    assert e["per_judge"]["2:j3"]["parse_failures"] == 1 and e["per_judge"]["0:j1"]["parse_failures"] == 0
    assert c["judge_parse_failures"] == 1 and results["judge_tally"]["n"] == 9
    # ensemble: per session the mean of the judges with a verdict (4 on Mara's: 4, 5, 3; 2 on Bertram's: 2, 2)
    assert c["judge"]["overall"]["mean"] == pytest.approx((4 + 4 + 2) / 3) and e["judges_per_session"] == {2: 1, 3: 2}
    # two Mara sessions: 12 units of (4, 5, 3), 6 of (2, 2); ordered pairs of (4, 5, 3) weigh 0.5 per unit -> 6;
    # o_22 = 12; n_2 = 12, n_3 = n_4 = n_5 = 12, n = 48. sum o delta = 2 * (6*1 + 6*1 + 6*4) = 72;
    # sum n_c n_k delta = 2 * (144 * (1 + 4 + 9) + 144 * (1 + 4 + 1)) = 5760 -> 1 - 47 * 72 / 5760
    assert e["agreement"]["interval"] == pytest.approx(1 - 47 * 72 / 5760)
    assert e["agreement"]["pairable_units"] == 3 * DIMENSIONS
    # one dimension: 2 units of (4, 5, 3), 1 of (2, 2): n_c = 2 each, n = 8 -> 1 - 7 * 12 / (2 * 4 * 20)
    assert e["agreement"]["by_dimension"]["engagement"]["interval"] == pytest.approx(1 - 7 * 12 / 160)
    rows = [json.loads(line) for line in (out / "judgements.jsonl").open()]
    assert len(rows) == 9 and {r["judge"] for r in rows} == set(e["judges"])
    scores = [json.loads(line) for line in (out / "scores.jsonl").open()]
    assert scores[2]["verdicts"]["engagement"] == 2 and scores[2]["verdicts_by_judge"]["2:j3"]["engagement"] is None
    report = (out / "report.md").read_text()
    assert (
        "## Conversations (judge `0:j1, 1:j2, 2:j3`" in report
        and "Judge ensemble (3 judges)" in report
        and "`2:j3` 2 verdicts, 1 unparsed, 0 unanswered" in report
    )
    assert f"interval {1 - 47 * 72 / 5760:.3f}" in report
    p = again["conversation"]["pairwise"]
    flips = {name: j["flip_rate"]["overall"] for name, j in p["per_judge"].items()}
    assert flips["0:j1"] == {"pairs": 3 * DIMENSIONS, "flipped": 3 * DIMENSIONS, "rate": 1.0}
    assert flips["1:j2"]["rate"] == 0 and flips["2:j3"] == {"pairs": 0, "flipped": 0, "rate": None}
    assert p["flip_rate"]["overall"]["rate"] == 0.5 and p["parse_failures"] == 6
    assert p["dimensions"]["engagement"]["mean"] == 0.5 and p["dimensions"]["engagement"]["position_inconsistent"] == 3
    report = (tmp_path / "again" / "report.md").read_text()
    assert "Pairwise flip rate" in report and "- `2:j3`: overall - (0/0)" in report and "(6 unparsed, 0" in report


def test_every_judge_of_the_ensemble_is_held_apart_from_the_user_simulator(compose):
    """Without a simulator of its own, the judge group's endpoint and model play the user: an ensemble judge
    that leaves the model as it is (``{}``) is that model, and refused; other models are not."""
    judge = ("judge=openai", "judge.base_url=http://localhost:9/v1", "judge.model=judge-7b", "judge.api_key_env=null")
    common = ("objective=none", "data=sample_conversation", "evaluator.allow_shared_judge=false", *judge)
    with pytest.raises(ConfigError, match=r"judge 0 of the ensemble \(evaluator.judges\[0\]\) are one model"):
        validate(compose(*common, "evaluator.judges=[{}, {model: other-7b}]"))
    assert validate(compose(*common, "evaluator.judges=[{model: a-7b}, {model: b-7b}]")).overlaps == ()
    with pytest.raises(ConfigError, match=r"evaluator.judges\[1\].temperature"):
        validate(compose(*common, "evaluator.judges=[{model: a-7b}, {temperature: oops}]"))


@pytest.mark.slow
def test_the_flip_rate_counts_verdicts_that_follow_the_position_per_judge_and_pooled(chat_stub, judge_config):
    """Two whole sessions, this run's the better ("good") in both. Judge ja answers "A" on x whatever the order (its
    verdict flips with the swap: 2 of 2 sessions) and picks the better on y; jb picks the better on both."""
    from rpbench.eval.benchmarks.conversation.ensemble import pairwise_ensemble
    from rpbench.eval.benchmarks.conversation.pairwise import judge_pairwise
    from rpbench.scoring.chat.client import open_client

    def session(sid: str, text: str) -> dict:
        scenario = {"character": "X", "card": "c", "persona": "p", "goal": "g", "ended_by": "turn_limit"}
        return {"id": sid, **scenario, "messages": [{"role": "character", "text": text}]}

    mine = [session("s1", "good"), session("s2", "good")]
    other = {s["id"]: session(s["id"], "bad") for s in mine}

    def reply(body: dict) -> str:
        first = body["messages"][-1]["content"].split("Conversation A:", 1)[1].split("Conversation B:", 1)[0]
        better = "A" if "good" in first else "B"
        return json.dumps({"x": "A" if body["model"] == "ja" else better, "y": better})

    bootstrap = {"n_resamples": 10, "confidence": 0.95, "seed": 0, "method": "percentile"}
    rubric = {"x": "In role?", "y": "Engaging?"}
    judged = {}
    with chat_stub(reply) as stub:
        for model in ("ja", "jb"):
            with open_client(judge_config(base_url=stub.url, model=model, max_retries=0)) as client:
                judged[model] = (judge_pairwise(client, mine, other, rubric, 32, bootstrap, set()), {})
    results, rows = pairwise_ensemble(judged, list(rubric), bootstrap)
    ja, jb = results["per_judge"]["ja"]["flip_rate"], results["per_judge"]["jb"]["flip_rate"]
    assert ja["dimensions"]["x"] == {"pairs": 2, "flipped": 2, "rate": 1.0} and ja["dimensions"]["y"]["rate"] == 0
    assert ja["overall"] == {"pairs": 4, "flipped": 2, "rate": 0.5} and jb["overall"]["rate"] == 0
    assert results["flip_rate"]["overall"] == {"pairs": 8, "flipped": 2, "rate": 0.25}
    assert results["flip_rate"]["dimensions"]["x"]["rate"] == 0.5
    # the ensemble's win rate per session: x the mean of ja's 0.5 (one order won) and jb's 1; y 1 from both
    assert results["dimensions"]["x"]["mean"] == 0.75 and results["dimensions"]["y"]["mean"] == 1.0
    assert results["dimensions"]["x"]["position_inconsistent"] == 2 and results["shared_sessions"] == 2
    assert len(rows) == 8 and {r["judge"] for r in rows} == {"ja", "jb"}


def test_a_served_judges_entry_is_merged_over_the_judge_groups_server(compose):
    """judge=local: ``{server: {model: ...}}`` replaces the served model and keeps the group's serving options."""
    from rpbench.eval.benchmarks.conversation.ensemble import ensemble_configs

    judges = "evaluator.judges=[{server: {model: tiny-llama}}, {server: {model: tiny-gemma2}, temperature: 0.7}]"
    user = "evaluator.simulator.server=smollm2-135m-instruct"
    spec = validate(compose("objective=none", "data=sample_conversation", "judge=local", user, judges))
    configs = ensemble_configs(spec.judge, spec.evaluator.judges)
    assert [c.server.model for c in configs] == ["tiny-llama", "tiny-gemma2"]
    assert configs[0].server.max_batch_size == spec.judge.server.max_batch_size == 8
    assert (configs[0].temperature, configs[1].temperature) == (spec.judge.temperature, 0.7)
