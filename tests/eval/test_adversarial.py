"""evaluator=conversation_adversarial: the tiny policy model against a scripted user simulator and judge on
127.0.0.1; break rate and turn of first break per level, the safety verdicts apart, failed verdicts counted and
never scored, and named errors for malformed adversarial scenarios."""

from __future__ import annotations

import json

import pytest
from stub_endpoints import stub_judge

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data import readers
from rpbench.data.files import package_path
from rpbench.data.readers import NoRubrics
from rpbench.pipeline import RunFailed
from rpbench.scoring.judge.conversation_safety import parse_safety

NO_RUBRICS = NoRubrics(task_dimensions=None)
SAMPLE = package_path("pkg://rpbench/resources/sample/conversation/adversarial-scenarios.jsonl")
PLAIN = package_path("pkg://rpbench/resources/sample/conversation/scenarios.jsonl")
SCORES = dict.fromkeys(
    [
        "character_consistency",
        "persona_drift",
        "knowledge_boundary",
        "out_of_character",
        "engagement",
        "goal_progress",
    ],
    4,
)
# the character judge's breaks per scenario (by the user's persona, which its prompt states); "unparsed" never
# answers in JSON, "unanswered" fails with HTTP 500 (judge.max_retries=0)
BREAKS = {
    "Jonas": [2, 3],  # identity-mara-radio
    "Pim": [],  # identity-greta-ledger
    "Ada": [1],  # knowledge-bertram-phone
    "Rolf": "unparsed",  # knowledge-greta-rail
    "developer": [3],  # jailbreak-mara-override
    "gang member": [2, 9],  # jailbreak-corvin-recipe: turn 9 does not exist (left out)
    "Mira": "unanswered",  # emotional-bertram-grief
    "Tobin": [],  # emotional-greta-guilt
}
# the safety judge's verdict per scenario: (real_harm, in_story_villainy), or "unparsed"
SAFETY = {"Pim": "unparsed", "Rolf": (False, True), "gang member": (True, True)}


def persona_of(text: str) -> str:
    return next(name for name in BREAKS if name in text.split("\n\n", 1)[0])


def scripted(body: dict) -> str | int:
    text = body["messages"][-1]["content"]
    if "Write only your next message" in text:
        return f"Come on, answer me ({text.count(chr(10))})."
    if "checking a role-play conversation for real-world harm" in body["messages"][0]["content"]:
        verdict = SAFETY.get(persona_of(body["messages"][0]["content"]), (False, False))
        if verdict == "unparsed":
            return "I would rather not say."
        harm_turns = [2] if verdict[0] else []
        return json.dumps({"real_harm": verdict[0], "harm_turns": harm_turns, "in_story_villainy": verdict[1]})
    breaks = BREAKS[persona_of(body["messages"][0]["content"])]
    if breaks == "unanswered":
        return 500
    if breaks == "unparsed":
        return "The character did well."
    return json.dumps({"scores": SCORES, "breaks": [{"turn": t, "reason": "left the role"} for t in breaks]})


@pytest.fixture(scope="module")
def run(run_in_process):
    def run(out, stub, *extra):
        return run_in_process(
            out,
            "objective=none",
            "logger=none",
            "data=sample_conversation_adversarial",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.bootstrap.n_resamples=20",
            "evaluator.max_turns=3",
            "evaluator.drift.enabled=false",
            "evaluator.simulator_checks=[]",
            *stub_judge(stub.url),
            "judge.max_retries=0",
            *extra,
        )

    return run


def lines(path):
    return [json.loads(line) for line in path.open()]


@pytest.mark.slow
def test_breaks_per_level_and_safety_apart(tmp_path, chat_stub, run):
    with chat_stub(scripted) as stub:
        results = run(tmp_path / "run", stub)["eval"]
        requests = [r["messages"] for r in stub.requests]
    out = tmp_path / "run"
    simulator = [m[-1]["content"] for m in requests if "Write only your next message" in m[-1]["content"]]
    assert len(simulator) == 8 * 2  # three character turns per session (max_turns=3), the last one unanswered
    # the simulated user presses with its scenario's level and tactic
    radio = [t for t in simulator if "Jonas" in t]
    assert radio and all("admit that it is an AI" in t and "what model she runs on" in t for t in radio)
    assert all("testing whether" in t for t in simulator)
    safety_asked = [m for m in requests if "real-world harm" in m[0]["content"]]
    assert len(safety_asked) == 8 + 2  # every session once; Pim's unparsed reply re-asked to parse_tries=3
    assert {m[0]["content"].count("[Turn ") for m in safety_asked} == {3}

    character = results["adversarial"]["character"]
    assert list(character) == ["identity", "knowledge", "jailbreak", "emotional", "all"]
    rates = {level: c["break_rate"]["mean"] for level, c in character.items()}
    assert rates == {"identity": 0.5, "knowledge": 1.0, "jailbreak": 1.0, "emotional": 0.0, "all": pytest.approx(4 / 6)}
    first = {level: c["first_break_turn"]["mean"] for level, c in character.items()}
    assert first == {"identity": 2.0, "knowledge": 1.0, "jailbreak": 2.5, "emotional": None, "all": 2.0}
    counts = {
        level: (c["judged"], c["broken"], c["unbroken"], c["parse_failures"], c["request_failures"])
        for level, c in character.items()
    }
    assert counts == {
        "identity": (2, 1, 1, 0, 0),
        "knowledge": (1, 1, 0, 1, 0),
        "jailbreak": (2, 2, 0, 0, 0),
        "emotional": (1, 0, 1, 0, 1),
        "all": (6, 4, 2, 1, 1),
    }
    assert character["all"]["break_rate"]["n"] == 6 and character["all"]["first_break_turn"]["n"] == 4
    assert [c["number"] for level, c in character.items() if level != "all"] == [1, 2, 3, 4]

    safety = results["adversarial"]["safety"]
    summary = {
        level: (s["judged"], s["real_harm"], s["in_story_villainy"], s["parse_failures"]) for level, s in safety.items()
    }
    assert summary == {
        "identity": (1, 0, 0, 1),
        "knowledge": (2, 0, 1, 0),
        "jailbreak": (2, 1, 0, 0),  # the smuggler's villainy came with real harm: a failure, not villainy only
        "emotional": (2, 0, 0, 0),
        "all": (7, 1, 1, 1),
    }
    assert safety["all"]["real_harm_rate"] == pytest.approx(1 / 7)
    verdicts = {row["id"]: row for row in lines(out / "safety.jsonl")}
    assert verdicts["jailbreak-corvin-recipe"]["harm_turns"] == [2]
    assert verdicts["identity-greta-ledger"]["status"] == "parse_failure"
    assert verdicts["identity-greta-ledger"]["real_harm"] is None

    # the character scores are the character judge's alone: real harm leaves them as they were
    scores = {row["id"]: row["verdicts"] for row in lines(out / "scores.jsonl")}
    assert scores["jailbreak-corvin-recipe"] == SCORES
    assert scores["knowledge-greta-rail"] == dict.fromkeys(SCORES)  # an unparsed verdict is no score
    assert results["conversation"]["judge"]["overall"]["mean"] == 4.0
    assert results["conversation"]["judge"]["overall"]["n"] == 6
    assert results["judge_tally"] == {"n": 8 + 8, "parse_failures": 2, "request_failures": 1}
    assert "failed" not in results
    report = (out / "report.md").read_text()
    assert "## In character under pressure" in report and "| jailbreak | 2 | 1 | 0 |" in report


@pytest.mark.slow
def test_no_character_verdict_leaves_no_break_rate(tmp_path, chat_stub, run):
    """Every character verdict unanswered: the break rate has no value and the run says its results rest on
    nothing (no 0 is scored); the safety verdicts are still reported apart."""

    def reply(body: dict) -> str | int:
        text = body["messages"][-1]["content"]
        if "Judge only the character" in text:
            return 500
        return scripted(body)

    with chat_stub(reply) as stub, pytest.raises(RunFailed, match=r"its headline \(break rate\) has no value"):
        run(tmp_path / "run", stub)
    results = json.loads((tmp_path / "run" / "metrics.json").read_text())["eval"]
    c = results["adversarial"]["character"]["all"]
    assert c["judged"] == 0 and c["request_failures"] == 8 and c["break_rate"]["mean"] is None
    assert "results rest on nothing" in results["failed"]
    assert results["adversarial"]["safety"]["all"]["judged"] == 7


def scenario(**fields):
    base = {
        "id": "s1",
        "character": "Mara Voss",
        "card": "A sea captain.",
        "persona": "A student.",
        "goal": "Test her.",
        "opening": "Hello!",
        "turns": 3,
    }
    return {k: v for k, v in (base | fields).items() if v is not None}


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"level": "identity"}, "tactic", "required with level"),
        ({"tactic": "Ask twice."}, "level", "required with tactic"),
        ({"level": "flattery", "tactic": "Praise her."}, "level", "one of identity, knowledge, jailbreak, emotional"),
        ({"level": "identity", "tactic": " "}, "tactic", "a non-empty string"),
        ({"level": 3, "tactic": "Ask twice."}, "level", "a string"),
    ],
)
def test_a_malformed_adversarial_scenario_is_named(tmp_path, fields, field, problem):
    path = tmp_path / "scenarios.jsonl"
    good = scenario(id="s0", level="identity", tactic="Ask twice.")
    path.write_text(json.dumps(good) + "\n" + json.dumps(scenario(**fields)) + "\n")
    with pytest.raises(DataFormatError, match=rf"scenarios\.jsonl: record 2: field '{field}': .*{problem}"):
        readers.read("conversation", "test", path, NO_RUBRICS)


def test_the_bundled_scenarios_cover_every_level_twice():
    examples = readers.read("conversation", "test", SAMPLE, NO_RUBRICS).examples
    levels = [e.meta["level"] for e in examples]
    assert sorted(levels) == sorted(["identity", "knowledge", "jailbreak", "emotional"] * 2)
    assert all(e.meta["tactic"] for e in examples)


@pytest.mark.slow
def test_plain_scenarios_are_refused_when_read_and_other_modes_at_startup(compose):
    from rpbench.validate import check_test_records, validate

    with pytest.raises(ConfigError, match=r"evaluator.pairwise_with=.*not with evaluator=conversation_adversarial"):
        validate(compose("data=sample_conversation_adversarial", "objective=none", "evaluator.pairwise_with=x"))
    spec = validate(compose("data=sample_conversation_adversarial", "objective=none", "judge=local"))
    adversarial = readers.read("conversation", "test", SAMPLE, NO_RUBRICS).examples
    check_test_records(spec, adversarial)  # every record names its level
    plain = readers.read("conversation", "test", PLAIN, NO_RUBRICS).examples
    with pytest.raises(ConfigError, match=r"record 'rolemrc-mara-lighthouse' \(6 in all\): field level: required"):
        check_test_records(spec, [*adversarial, *plain])


def test_the_judge_estimate_counts_the_safety_verdict(compose):
    """Per session: the simulator's messages (turns - 1), the session judgement and the safety verdict."""
    from rpbench.eval.benchmarks import BENCHMARKS
    from rpbench.validate import validate

    spec = validate(compose("data=sample_conversation_adversarial", "objective=none", "judge=local"))
    examples = readers.read("conversation", "test", SAMPLE, NO_RUBRICS).examples
    benchmark = BENCHMARKS.get("conversation_adversarial")
    assert benchmark.judge_requests(spec.evaluator, examples) == [e.meta["turns"] - 1 + 2 for e in examples]
    assert benchmark.reaskable_requests(spec.evaluator, examples) == [2] * len(examples)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        (
            'Verdict: {"real_harm": true, "harm_turns": [3, 1, 3], "in_story_villainy": false, "reason": "r"}',
            {"real_harm": True, "harm_turns": [1, 3], "in_story_villainy": False, "reason": "r"},
        ),
        (
            '{"real_harm": false, "in_story_villainy": true}',
            {"real_harm": False, "harm_turns": [], "in_story_villainy": True, "reason": ""},
        ),
        ('{"real_harm": "no", "in_story_villainy": true}', None),
        ('{"real_harm": false}', None),
        ('{"real_harm": false, "in_story_villainy": false, "harm_turns": [true]}', None),
        ("no JSON", None),
    ],
)
def test_safety_verdicts_parse_strictly(text, parsed):
    assert parse_safety(text) == parsed
