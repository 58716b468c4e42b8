"""evaluator.judges for evaluator=conversation: scripted judges on 127.0.0.1 that disagree (per-judge scores,
the ensemble's mean, Krippendorff's alpha by hand), a judge whose replies do not parse (counted, not a 0),
each judge held apart from the user simulator, and the flip rate of position-swapped pairwise verdicts."""

from __future__ import annotations

import json

import pytest

from rpbench.core.errors import ConfigError
from rpbench.validate import validate

DIMENSIONS = 6  # the rubric of conf/evaluator/common/conversation_session.yaml
# judge model -> the score it gives every dimension of the session whose character it names (None: unparsed)
SCORES = {"j1": {"Mara": 4, "Bertram": 2}, "j2": {"Mara": 5, "Bertram": 2}, "j3": {"Mara": 3, "Bertram": None}}


def reply(body: dict) -> str:
    """The user simulator (the judge group's model) asks on; judge jK scores by SCORES, or answers no JSON."""
    text = json.dumps(body["messages"])
    if body["model"] not in SCORES:
        return "Tell me more, please."
    score = SCORES[body["model"]]["Mara" if "Mara Voss" in text else "Bertram"]
    if score is None:
        return "I would rather not say."
    dimensions = ("character_consistency", "persona_drift", "knowledge_boundary", "out_of_character")
    names = (*dimensions, "engagement", "goal_progress")
    return json.dumps({"scores": dict.fromkeys(names, score), "breaks": []})


@pytest.mark.slow
def test_three_judges_score_every_session_and_agree_by_krippendorffs_alpha(tmp_path, chat_stub, run_in_process):
    """The sample's first three sessions (Mara, Mara, Bertram), one turn each; j3's replies on Bertram's do not
    parse."""
    with chat_stub(reply) as stub:
        out = tmp_path / "run"
        results = run_in_process(
            out,
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
            "judge=openai",
            f"judge.base_url={stub.url}",
            "judge.api_key_env=null",
            "judge.cache_path=null",
            "judge.progress=false",
            "judge.max_retries=0",
            "judge.parse_tries=2",
        )["eval"]
        asked = [r["model"] for r in stub.requests]
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
    assert "Judge ensemble (3 judges)" in report and "`2:j3` 2 verdicts, 1 unparsed, 0 unanswered" in report
    assert f"interval {1 - 47 * 72 / 5760:.3f}" in report


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
