"""evaluator=conversation: sessions between the tiny model and a scripted user simulator/judge on 127.0.0.1
(batched per turn, ended by the turn limit or the stop marker), session judging, drift and OOC metrics,
resuming after a run killed mid-session, and named errors for malformed scenario files."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import numpy as np
import pytest
from stub_endpoints import stub_judge

from rpbench.core.errors import DataFormatError
from rpbench.data import readers
from rpbench.data.files import package_path
from rpbench.data.readers import NoRubrics
from rpbench.eval.benchmarks.conversation.drift import card_similarities, ooc_hits, session_drift, slope
from rpbench.scoring.chat.client import EndpointConfigError
from rpbench.scoring.judge.conversation import parse_verdict

NO_RUBRICS = NoRubrics(task_dimensions=None)

SAMPLE = package_path("pkg://rpbench/resources/sample/conversation/scenarios.jsonl")
RUBRIC = ["character_consistency", "persona_drift", "knowledge_boundary", "out_of_character", "engagement"]


def scripted(fail_at_turn: int | None = None):
    """The user simulator (asks until Lena's second message, then ends) and the judge (4s, goal 2; breaks at
    turn 1 of Bertram's sessions, and one at a turn that does not exist). ``fail_at_turn``: the simulator's
    endpoint refuses (401: the run stops) when asked after that character turn."""

    def reply(body: dict) -> str | int:
        text = body["messages"][-1]["content"]
        if "Stay in character" in body["messages"][0]["content"]:  # the evaluated model, when it is an endpoint
            turn = sum(m["role"] == "assistant" for m in body["messages"]) + 1
            card = body["messages"][0]["content"].split("Character card:\n", 1)[1]
            return {1: card, 2: "As an AI language model, I cannot say."}.get(turn, "The tides are kind today.")
        if "Write only your next message" in text:
            asked = text.count("\nUser:") - 1  # the simulator's messages so far (the opening is not one)
            character_turns = len(re.findall(r"^(?!User:)[A-Z][a-z]+ [A-Z][a-z]+: ", text, re.M))
            if fail_at_turn is not None and character_turns >= fail_at_turn:
                return 401
            if "Lena" in text and asked >= 1:
                return "Thanks, Captain!\n[END]"
            return f"Tell me more, please ({character_turns})."
        scores = dict.fromkeys(RUBRIC, 4) | {"goal_progress": 2}
        breaks = (
            [{"turn": 1, "reason": "modern words"}, {"turn": 9, "reason": "no such turn"}] if "Bertram" in text else []
        )
        return "Verdict:\n" + json.dumps({"scores": scores, "breaks": breaks})

    return reply


@pytest.fixture(scope="module")
def run(run_in_process):
    def run(out, stub, *extra):
        return run_in_process(
            out,
            "objective=none",
            "logger=none",
            "data=sample_conversation",
            "evaluator=conversation",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.bootstrap.n_resamples=20",
            *stub_judge(stub.url),
            "judge.max_retries=0",
            *extra,
        )

    return run


def lines(path):
    return [json.loads(line) for line in path.open()]


def settled(stub, quiet_s: float = 0.3) -> int:
    """How many requests ``stub`` has had once none arrived for ``quiet_s`` (a stopped run's requests that were
    already sent reach the server after the run has raised)."""
    count = -1
    while count != len(stub.requests):
        count = len(stub.requests)
        time.sleep(quiet_s)
    return count


@pytest.mark.slow
def test_sessions_are_batched_per_turn_judged_and_measured(tmp_path, chat_stub, run):
    """The evaluated model is the scripted endpoint too: it answers turn 1 with the card itself, turn 2 with an
    out-of-character slip, later turns with a line of its own."""
    with chat_stub(scripted()) as stub:
        model = ["evaluator.backend=endpoint", f"evaluator.endpoint.base_url={stub.url}", "evaluator.endpoint.model=m"]
        results = run(tmp_path / "run", stub, *model)["eval"]
        requests = stub.requests
    out = tmp_path / "run"
    sessions = {s["id"]: s for s in lines(out / "conversations.jsonl")}
    assert len(sessions) == 6
    lena = sessions["rolemrc-mara-phone"]
    assert lena["ended_by"] == "simulator" and lena["n_character_turns"] == 2
    assert [m["role"] for m in lena["messages"]] == ["user", "character", "user", "character", "user"]
    assert lena["messages"][-1]["text"] == "Thanks, Captain!"
    limits = {s["id"]: s["turn_limit"] for s in sessions.values()}
    assert all(s["n_character_turns"] == limits[i] for i, s in sessions.items() if i != "rolemrc-mara-phone")
    # one generation call per turn for all live sessions: 6, 6, 5 (Lena ended), 3 (the 4-turn scenarios)
    assert [len(lines(out / f"predictions_turn_{t}.jsonl")) for t in range(1, 5)] == [6, 6, 5, 3]
    assert not (out / "predictions_turn_5.jsonl").exists()
    simulator = [r for r in requests if "Write only your next message" in r["messages"][-1]["content"]]
    generated = [r for r in requests if r["model"] == "m"]
    judged = [r for r in requests if r not in simulator and r not in generated]
    assert len(generated) == 6 + 6 + 5 + 3
    # every turn but a session's last asks the simulator: 3+2+3+2+3+2, Lena's two included
    assert len(simulator) == 15 and {r["temperature"] for r in simulator} == {0.7}
    assert {r["max_tokens"] for r in simulator} == {128}
    assert len(judged) == 6 and {r["max_tokens"] for r in judged} == {512} and {r["temperature"] for r in judged} == {0}
    c = results["conversation"]
    assert c["ended_by"] == {"simulator": 1, "turn_limit": 5}
    assert {d: s["mean"] for d, s in c["judge"].items()} == dict.fromkeys(RUBRIC, 4.0) | {
        "goal_progress": 2.0,
        "overall": pytest.approx((4 * 5 + 2) / 6),
    }
    assert c["breaks_out_of_range"] == 2 and c["judge_parse_failures"] == 0
    flags = {row["id"]: row["flags"] for row in lines(out / "flags.jsonl")}
    assert flags["mmrole-bertram-bread"] == [
        {"turn": 1, "by": "judge", "reason": "modern words"},
        {"turn": 2, "by": "ooc_phrases", "reason": "as an ai, language model"},
    ]
    assert flags["rpgbench-greta-room"] == [{"turn": 2, "by": "ooc_phrases", "reason": "as an ai, language model"}]
    assert c["flags_by_turn"] == {1: 2, 2: 6} and c["sessions_flagged"] == 6
    assert c["ooc"]["by_phrase"] == {"as an ai": 6, "language model": 6} and c["ooc"]["phrases"]["mean"] == 2
    scores = {row["id"]: row for row in lines(out / "scores.jsonl")}
    assert scores["rpgbench-greta-room"]["verdicts"]["goal_progress"] == 2
    # drift from the packaged MiniLM, checked against a direct computation for one session
    from rpbench.eval.benchmarks.conversation.drift import load_encoder

    model = load_encoder(None)[0]
    greta = sessions["rpgbench-greta-room"]
    replies = [m["text"] for m in greta["messages"] if m["role"] == "character"]
    assert replies[0] == greta["card"] and len(replies) == 4
    raw = model.encode([greta["card"], *replies], convert_to_numpy=True)
    cosine = [float(raw[0] @ v / np.linalg.norm(raw[0]) / np.linalg.norm(v)) for v in raw[1:]]
    assert cosine[0] == pytest.approx(1.0, abs=1e-5) and cosine[1] < 0.5
    metrics = scores["rpgbench-greta-room"]["metrics"]
    assert metrics["drift_slope"] == pytest.approx(float(np.polyfit([1, 2, 3, 4], cosine, 1)[0]), abs=1e-5)
    assert metrics["drift_slope"] < 0 and metrics["mean_similarity"] == pytest.approx(np.mean(cosine), abs=1e-5)
    assert metrics["ooc_phrases"] == 2 and c["drift"]["empty_replies"] == 0
    assert c["drift"]["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "Conversations (judge" in (out / "report.md").read_text()
    assert (
        json.loads((out / "metrics.json").read_text())["eval"]["generation"]["turn_1"]["path"]
        == "predictions_turn_1.jsonl"
    )


@pytest.mark.slow
def test_a_shared_judge_runs_when_allowed_and_a_session_cut_after_one_turn_is_counted_apart(tmp_path, chat_stub, run):
    """One endpoint and model play the user and judge the sessions, allowed by evaluator.allow_shared_judge: the
    run names the overlap in metrics.json and report.md. The simulator fails Nadia's session after the first
    character turn: cut short (simulator_error), not judged, left out of the means and counted by cause."""

    def reply(body: dict) -> str | int:
        text = body["messages"][-1]["content"]
        return 503 if "Write only your next message" in text and "Nadia" in text else scripted()(body)

    with chat_stub(reply) as stub:
        results = run(tmp_path / "run", stub, "evaluator.allow_shared_judge=true", "evaluator.drift.enabled=false")
        judged = [r for r in stub.requests if "Judge only the character" in r["messages"][-1]["content"]]
        overlap = (
            f"the user simulator (evaluator.simulator) and the judge (judge) are one model, gpt-4o-mini ({stub.url}) "
            "(allowed by evaluator.allow_shared_judge=true)"
        )
    c = results["eval"]["conversation"]
    assert c["sessions_cut_short"] == {"simulator_error": 1} and c["ended_by"]["simulator_error"] == 1
    assert len(judged) == 5 and not [r for r in judged if "Nadia" in r["messages"][-1]["content"]]
    assert c["judge"]["overall"]["n"] == 5 and c["judge"]["overall"]["n_missing"] == 1
    assert c["judge"]["goal_progress"]["mean"] == 2.0  # every judged session's score; the cut one is not a 0
    assert overlap in json.loads((tmp_path / "run" / "metrics.json").read_text())["warnings"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert overlap in report and "Left out of the means: 1 session cut short (simulator_error 1)" in report


@pytest.mark.slow
def test_a_run_killed_mid_session_resumes_from_its_files(tmp_path, chat_stub, run):
    out = tmp_path / "run"
    replies = {"now": scripted(fail_at_turn=3)}  # one simulator endpoint for both runs: the killed one's
    with chat_stub(lambda body: replies["now"](body)) as stub:
        with pytest.raises(EndpointConfigError):
            run(out, stub, "evaluator.drift.enabled=false")
        first = lines(out / "conversations.jsonl")
        # Lena (ended at turn 2) and the two other 3-turn sessions (at their limit) were written before the stop
        ended = ["mmrole-bertram-mill", "rolemrc-mara-phone", "rpgbench-greta-stranger"]
        assert sorted(s["id"] for s in first) == ended
        with (out / "conversations.jsonl").open("a") as f:
            f.write('{"id": "rolemrc-mara-light')  # cut off mid-write
        before = settled(stub)  # the killed run's requests still in flight when it stopped are its own
        replies["now"] = scripted()
        results = run(out, stub, "evaluator.drift.enabled=false")["eval"]
        requests = stub.requests[before:]
        final = lines(out / "conversations.jsonl")
        # other generation settings in the same folder: nothing of the earlier sessions is read back
        longer = run(out, stub, "evaluator.drift.enabled=false", "evaluator.generation.max_new_tokens=5")["eval"]
    assert longer["resumed"]["sessions_resumed"] == 0
    assert longer["resumed"]["set_aside"] == {"file": "conversations.1.jsonl", "differs": ["generation.max_new_tokens"]}
    assert [longer["generation"][f"turn_{t}"]["n_resumed"] for t in (1, 2, 3, 4)] == [0, 0, 0, 0]
    assert results["resumed"]["sessions_resumed"] == 3
    assert [results["generation"][f"turn_{t}"]["n_resumed"] for t in (1, 2, 3, 4)] == [6, 6, 5, 0]
    simulator = [r for r in requests if "Write only your next message" in r["messages"][-1]["content"]]
    assert len(simulator) == 3  # only the three 4-turn sessions after turn 3
    assert lines(out / "conversations.1.jsonl") == final  # set aside whole by the run of other settings
    assert final[:3] == first and len({s["id"] for s in final}) == len(final) == 6
    with chat_stub(scripted()) as stub:
        run(tmp_path / "whole", stub, "evaluator.drift.enabled=false")
    whole = {s["id"]: s for s in lines(tmp_path / "whole" / "conversations.jsonl")}
    assert {s["id"]: s for s in final} == whole


GOOD = {"id": "a", "character": "X", "card": "c", "persona": "p", "goal": "g", "opening": "o", "turns": 2}


@pytest.mark.parametrize(
    "line, field",
    [
        ({k: v for k, v in GOOD.items() if k != "goal"}, "goal"),
        (GOOD | {"turns": 0}, "turns"),
        (GOOD | {"turns": True}, "turns"),
        (GOOD | {"opening": " "}, "opening"),
        (GOOD | {"goals": 1}, "goals"),
        ({k: v for k, v in GOOD.items() if k != "id"}, "id"),
    ],
)
def test_a_malformed_scenario_is_named_by_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "scenarios.jsonl"
    good = json.loads(SAMPLE.read_text().splitlines()[0])
    path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(DataFormatError, match=rf"scenarios\.jsonl: record 2.*: field '{field}'"):
        readers.read("conversation", "test", path, NO_RUBRICS)
    assert (
        readers.read("conversation", "test", path, NO_RUBRICS, replace(readers.STRICT, on_error="skip")).summary()[
            "skipped"
        ]
        == 1
    )


def test_the_drift_slope_and_similarities_match_hand_computed_values():
    # turns 1-4, similarities 0.9, 0.8, 0.8, 0.5: x - 2.5 = -1.5, -0.5, 0.5, 1.5; y - 0.75 = 0.15, 0.05, 0.05,
    # -0.25; slope = (-0.225 - 0.025 + 0.025 - 0.375) / 5 = -0.12
    assert slope([1, 2, 3, 4], [0.9, 0.8, 0.8, 0.5]) == pytest.approx(-0.12)
    assert slope([3], [0.5]) is None

    class Table:  # an encoder of fixed unit vectors: the card (1, 0), replies at known angles
        vectors = {"card": [1.0, 0.0], "near": [0.6, 0.8], "far": [0.0, 1.0], "same": [1.0, 0.0]}

        def encode(self, texts, **_):
            return np.array([self.vectors[t] for t in texts])

    # turn 2 is empty (no similarity); turns 1, 3, 4: 0.6, 1.0, 0.0 -> x - 8/3, y - 1.6/3 -> slope by hand:
    # dx = -5/3, 1/3, 4/3; dy = 0.6-0.5333 = 0.0667, 0.4667, -0.5333; sum dx*dy = -0.1111 + 0.1556 - 0.7111
    # = -0.6667; sum dx^2 = 25/9 + 1/9 + 16/9 = 42/9 -> slope = -0.6667 * 9 / 42 = -1/7
    drift = session_drift(Table(), "card", ["near", " ", "same", "far"], batch_size=2)
    assert drift["similarity"] == [pytest.approx(0.6), None, pytest.approx(1.0), pytest.approx(0.0)]
    assert drift["drift_slope"] == pytest.approx(-1 / 7)
    assert drift["mean_similarity"] == pytest.approx(1.6 / 3)
    assert card_similarities(Table(), "card", ["", " "], 2) == [None, None]


def test_ooc_phrases_and_judge_verdicts_are_read_strictly():
    assert ooc_hits("As an AI language model, I... as an ai.", ["as an AI", "language model", "OpenAI"]) == {
        "as an AI": 2,
        "language model": 1,
    }
    dims = ["a", "b"]
    assert parse_verdict('x {"scores": {"a": 5, "b": 1}, "breaks": [{"turn": 2, "reason": "r"}]} y', dims) == {
        "scores": {"a": 5, "b": 1},
        "breaks": [{"turn": 2, "reason": "r"}],
    }
    for bad in (
        '{"scores": {"a": 6, "b": 1}}',
        '{"scores": {"a": 5}}',
        '{"scores": {"a": true, "b": 1}}',
        '{"scores": {"a": 5, "b": 1}, "breaks": [2]}',
        "no json",
        '{"scores": {"a": 4.5, "b": 1}}',
    ):
        assert parse_verdict(bad, dims) is None, bad


def test_sessions_run_against_the_local_judge_server(tmp_path, run_in_process):
    """rpbench's own server (a tiny random model) as user simulator and judge: its verdicts are no JSON, so
    every session's judgement is a parse failure, counted and left out of the means, never scored: the run has no
    headline and fails, its metrics.json written."""
    from rpbench.pipeline import RunFailed

    out = tmp_path / "run"
    with pytest.raises(RunFailed, match=r"its headline \(session score \(1-5\)\) has no value"):
        run_in_process(
            out,
            "objective=none",
            "logger=none",
            "data=sample_conversation",
            "evaluator=conversation",
            "evaluator.max_turns=2",
            "evaluator.simulator.max_tokens=6",
            "evaluator.generation.max_new_tokens=4",
            "evaluator.drift.enabled=false",
            "evaluator.bootstrap.n_resamples=10",
            "judge=local",
            "evaluator.judge_max_tokens=4",
            "judge.parse_tries=1",
            "judge.cache_path=null",
            "judge.progress=false",
        )
    results = json.loads((out / "metrics.json").read_text())["eval"]
    c = results["conversation"]
    assert c["sessions"] == 6 and sum(c["ended_by"].values()) == 6
    # a session cut short, or failing a simulator check (the tiny model plays the user), is not judged
    judged = 6 - sum(c["sessions_cut_short"].values()) - c["simulator_checks"]["sessions_failed"]
    assert c["judge_parse_failures"] + c["judge_request_failures"] == judged
    assert all(s["n"] + s["n_missing"] == 6 for s in c["judge"].values())
    assert results["simulator_usage"]["requests"] >= 1 and results["judge_usage"]["requests"] == judged
    assert len(lines(out / "conversations.jsonl")) == 6


@pytest.mark.slow
def test_the_conversation_evaluator_refuses_a_run_without_a_judge_or_scenarios(compose):
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    with pytest.raises(ConfigError, match="evaluator=conversation needs a judge"):
        validate(compose("data=sample_conversation", "objective=none", "judge=none"))
    with pytest.raises(ConfigError, match="reads data=conversation"):
        validate(compose("data=sample", "evaluator=conversation", "objective=none", "judge=local"))
    for reference_based in ("rolemrc", "rolebench"):  # would score the replies against empty references
        with pytest.raises(ConfigError, match=f"evaluator={reference_based} scores replies against .* have none"):
            validate(compose("data=sample_conversation", f"evaluator={reference_based}", "objective=none"))
    with pytest.raises(ConfigError, match=r"evaluator.simulator.model"):
        validate(compose("data=sample_conversation", "objective=none", "judge=local", "evaluator.simulator.base_url=x"))
    with pytest.raises(ConfigError, match=r"evaluator.simulator.server='tiny-nope'.*a conf/model entry.*tiny-qwen2"):
        validate(
            compose("data=sample_conversation", "objective=none", "judge=local", "evaluator.simulator.server=tiny-nope")
        )
    endpoint = ["evaluator.simulator.base_url=http://127.0.0.1:1/v1", "evaluator.simulator.model=m"]
    with pytest.raises(ConfigError, match=r"evaluator.simulator.server='tiny-qwen2'.*null when base_url is set"):
        validate(
            compose(
                "data=sample_conversation",
                "objective=none",
                "judge=local",
                "evaluator.simulator.server=tiny-qwen2",
                *endpoint,
            )
        )


OPENAI_SIMULATOR = ("base_url=https://api.openai.com/v1", "model=gpt-4o-mini")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "overrides"),
    [
        ("evaluator.simulator", ("data=sample_conversation", "objective=none")),
        ("env.simulator", ("objective=grpo", "env=conversation", "data=sample_conversation", "evaluator=none")),
    ],
)
def test_a_simulator_endpoint_without_its_api_key_is_refused_at_startup(compose, monkeypatch, where, overrides):
    """The simulator's own endpoint (OpenAI's here) needs the key named by its own api_key_env, checked as the
    judge's is, before any model loads (the judge is local: it needs none)."""
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    monkeypatch.delenv("RPBENCH_TEST_SIM_KEY", raising=False)
    simulator = [f"{where}.{o}" for o in (*OPENAI_SIMULATOR, "api_key_env=RPBENCH_TEST_SIM_KEY")]
    message = rf"{where}\.api_key_env='RPBENCH_TEST_SIM_KEY': OpenAI's API needs a key in that environment variable"
    with pytest.raises(ConfigError, match=message):
        validate(compose(*overrides, "judge=local", *simulator))
    monkeypatch.setenv("RPBENCH_TEST_SIM_KEY", "sk-test")
    validate(compose(*overrides, "judge=local", *simulator))


def test_the_simulator_clients_missing_key_names_the_simulators_setting(judge_config):
    """Opened without its key, the simulator's client names its own key (evaluator.simulator.api_key_env), not
    the judge's."""
    from rpbench.scoring.chat.client import ChatClient
    from rpbench.scoring.judge.conversation import Simulator, open_simulator

    values = {"server": None, "base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini", "api_key_env": None}
    sim = Simulator.parse({**values, "temperature": 0.7, "max_tokens": 8, "stop_marker": "[END]", "seed": None}, "s")
    judge = ChatClient(judge_config(base_url="http://127.0.0.1:1/v1", model="m"))
    with pytest.raises(EndpointConfigError, match=r"^evaluator\.simulator\.api_key_env=None: OpenAI's API needs a key"):
        with open_simulator(judge, sim, None, "evaluator.simulator"):
            pass


def test_a_served_conf_model_plays_the_user(tmp_path, chat_stub, run):
    """evaluator.simulator.server=tiny-qwen2: the run serves it on 127.0.0.1 and asks it for the user's messages;
    the scripted endpoint only judges (2 scenarios, 2 turns: one simulator request per session)."""
    with chat_stub(scripted()) as stub:
        out = tmp_path / "run"
        results = run(
            out,
            stub,
            "evaluator.simulator.server=tiny-qwen2",
            "evaluator.simulator.max_tokens=6",
            "evaluator.max_turns=2",
            "evaluator.drift.enabled=false",
            "evaluator.simulator_checks=[]",  # a random tiny model's user turns would fail them: nothing judged
            "data.max_test_samples=2",
        )
        requests = stub.requests
    estimate, results = results["judge_estimate"], results["eval"]
    assert estimate["requests"] == 2  # the judgements only: the served simulator is not the judge's to pay
    assert not [r for r in requests if "Write only your next message" in r["messages"][-1]["content"]]
    assert len(requests) == 2 and results["judge_model"] != results["simulator_model"] == "tiny:qwen2"
    assert results["simulator_usage"]["requests"] == 2 and results["judge_usage"]["requests"] == 2
    assert results["simulator_usage"]["cost_usd"] == 0 < results["judge_usage"]["cost_usd"]
    assert results["judge_cost"]["cost_usd"] == pytest.approx(results["judge_usage"]["cost_usd"])
    sessions = lines(out / "conversations.jsonl")
    asked = {row["id"]: row for row in lines(out / "simulator_turn_1.jsonl")}
    assert len(sessions) == 2 and len(asked) == 2
    for s in sessions:  # the served model's reply became the user's second message (or ended the session)
        reply = asked[f"{s['id']}#user2"]
        assert reply["error"] is None
        if s["ended_by"] == "turn_limit":
            assert s["messages"][2] == {"role": "user", "text": reply["text"].strip()}


@pytest.mark.slow
def test_two_runs_are_judged_pairwise_in_both_orders_and_compared(tmp_path, chat_stub, run):
    """Run m slips out of character at turn 2, run m2 never does. The judge prefers the conversation without
    the slip on every dimension but engagement, where it always answers "A" (a position bias): m2's win rate
    is 1 on those and 0.5 on engagement, every session inconsistent there."""

    def reply(body: dict) -> str | int:
        text = body["messages"][-1]["content"]
        if body["model"] == "m2":
            return "Aye, the tides are kind."
        if "Conversation A:" in text:
            first, second = text.split("Conversation A:", 1)[1].split("Conversation B:", 1)
            better = "B" if "As an AI" in first else "A"
            return json.dumps(dict.fromkeys(RUBRIC[:4] + ["goal_progress"], better) | {"engagement": "A"})
        verdict = scripted()(body)  # a slip costs the session its out-of-character score
        return verdict.replace('"out_of_character": 4', '"out_of_character": 1') if "As an AI" in text else verdict

    with chat_stub(reply) as stub:
        common = [
            "evaluator.max_turns=2",
            "evaluator.drift.enabled=false",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={stub.url}",
        ]
        run(tmp_path / "m", stub, *common, "evaluator.endpoint.model=m")
        results = run(
            tmp_path / "m2",
            stub,
            *common,
            "evaluator.endpoint.model=m2",
            f"evaluator.pairwise_with={tmp_path / 'm'}",
            f"evaluator.compare_to={tmp_path / 'm'}",
        )["eval"]
        pairwise_requests = [r for r in stub.requests if "Conversation A:" in r["messages"][-1]["content"]]
    assert len(pairwise_requests) == 12  # 6 shared sessions x 2 orders
    p = results["conversation"]["pairwise"]
    assert p["shared_sessions"] == 6 and p["against"] == "m" and p["parse_failures"] == 0
    assert {d: s["mean"] for d, s in p["dimensions"].items()} == dict.fromkeys(RUBRIC + ["goal_progress"], 1.0) | {
        "engagement": 0.5
    }
    assert p["dimensions"]["engagement"]["position_inconsistent"] == 6
    assert p["dimensions"]["character_consistency"]["position_inconsistent"] == 0
    assert p["flip_rate"]["overall"] == {"pairs": 36, "flipped": 6, "rate": 1 / 6}  # engagement's 6 of 6 x 6
    rows = lines(tmp_path / "m2" / "pairwise.jsonl")
    assert len(rows) == 12 and {r["this_first"] for r in rows} == {True, False}
    # compare_to: paired tests of the judge-free OOC counts (m: two phrases per session, m2: none)
    assert (
        results["compare"]["ooc_phrases"]["delta"] == pytest.approx(-2.0) and results["compare"]["shared_records"] == 6
    )
    # multi-turn DPO's pairs from these runs' files: m2 chosen overall (no slip), ties on engagement
    from rpbench.synth.pairs_from_runs import build_pairs

    pairs, counts = build_pairs([tmp_path / "m", tmp_path / "m2"], "overall")
    assert len(pairs) == counts["pairs"] == 6 and {p["meta"]["chosen"]["run"] for p in pairs} == {"m2"}
    assert [p["meta"]["rejected"]["score"] for p in pairs] == [pytest.approx((4 * 4 + 1 + 2) / 6)] * 6
    assert all(p["chosen"][0] == {"role": "assistant", "content": "Aye, the tides are kind."} for p in pairs)
    assert all("As an AI" in p["rejected"][-1]["content"] and len(p["rejected"]) == 3 for p in pairs)
    assert build_pairs([tmp_path / "m", tmp_path / "m2"], "engagement")[1]["ties"] == 6


def test_a_pairwise_run_on_other_scenarios_is_named(tmp_path):
    from rpbench.eval.benchmarks.conversation.pairwise import read_other

    other = tmp_path / "other"
    other.mkdir()
    mine = SESSION | {"ended_by": "simulator"}
    (other / "conversations.jsonl").write_text(json.dumps(mine | {"goal": "another"}) + "\n")
    with pytest.raises(DataFormatError, match=r"conversations\.jsonl: record s1: field 'goal'"):
        read_other(str(other), [mine])
    assert read_other(str(other), [mine | {"id": "s2"}]) == {}


SESSION = {
    "id": "s1",
    "character": "X",
    "card": "c",
    "persona": "p",
    "goal": "g",
    "messages": [],
    "ended_by": "turn_limit",
}


def test_a_session_cut_short_or_failing_a_check_in_either_run_is_not_compared_pairwise(chat_stub, judge_config):
    """Of four shared scenarios, s2 was cut short here, s3 in the other run, and s4 failed a simulator check: only
    s1 is judged (both orders), the other three are counted. The judge prefers "A" both times: this run wins one
    order of two."""
    from rpbench.eval.benchmarks.conversation.pairwise import judge_pairwise
    from rpbench.scoring.chat.client import open_client

    endings = {
        "s1": ("turn_limit", "simulator"),
        "s2": ("simulator_error", "turn_limit"),
        "s3": ("turn_limit", "length"),
        "s4": ("turn_limit", "turn_limit"),
    }
    mine = [SESSION | {"id": sid, "ended_by": here} for sid, (here, _) in endings.items()]
    other = {sid: SESSION | {"id": sid, "ended_by": there} for sid, (_, there) in endings.items()}
    bootstrap = {"n_resamples": 10, "confidence": 0.95, "seed": 0, "method": "percentile"}
    with (
        chat_stub(lambda body: json.dumps({"consistency": "A"})) as stub,
        open_client(judge_config(base_url=stub.url, model="j", max_retries=0)) as client,
    ):
        results, judgements = judge_pairwise(client, mine, other, {"consistency": "In role?"}, 32, bootstrap, {"s4"})
        asked = stub.requests
    assert len(asked) == 2 and [j["id"] for j in judgements] == ["s1", "s1"]
    assert results["shared_sessions"] == 1 and results["cut_short"] == 2 and results["failed_checks"] == 1
    assert results["dimensions"]["consistency"]["mean"] == 0.5 and results["dimensions"]["consistency"]["n"] == 1


def test_the_other_runs_sessions_failing_a_check_are_read_from_its_simulator_checks_file(tmp_path):
    from rpbench.core.errors import DataFormatError
    from rpbench.eval.benchmarks.conversation.pairwise import failed_check_ids

    assert failed_check_ids(str(tmp_path)) == set()  # a run made before the checks wrote none
    rows = [{"id": "s1", "failed": []}, {"id": "s2", "failed": ["role_reversal"]}, {"id": "s3", "failed": []}]
    (tmp_path / "simulator_checks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert failed_check_ids(str(tmp_path)) == {"s2"}
    (tmp_path / "simulator_checks.jsonl").write_text(json.dumps({"id": "s1", "failed": "goal_leak"}) + "\n")
    with pytest.raises(DataFormatError, match=r"simulator_checks\.jsonl: record line 1: field 'failed'"):
        failed_check_ids(str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lines_written", "named"),
    [
        (["{not json"], r"line 1: field '\(line\)': a JSON object"),
        ([json.dumps({k: v for k, v in SESSION.items() if k != "goal"})], r"line 1: field 'goal': a string"),
        ([json.dumps(SESSION | {"messages": [{"role": "bot", "text": "x"}]})], r"line 1: field 'messages'"),
        ([json.dumps(SESSION), json.dumps(SESSION)], r"line 2: field 'id': one session per id"),
        ([], r"\(file\): field '\(lines\)': at least one session"),
    ],
)
def test_a_bad_pairwise_with_file_is_named_at_startup(compose, tmp_path, lines_written, named):
    """evaluator.pairwise_with's conversations.jsonl is read by validate: file, line and field of a bad line."""
    from rpbench.core.errors import ConfigError
    from rpbench.validate import validate

    other = tmp_path / "other"
    other.mkdir()
    (other / "conversations.jsonl").write_text("".join(line + "\n" for line in lines_written))
    cfg = compose("data=sample_conversation", "objective=none", "judge=local", f"evaluator.pairwise_with={other}")
    with pytest.raises(ConfigError, match=r"evaluator\.pairwise_with: .*other/conversations\.jsonl: record " + named):
        validate(cfg)


def test_a_pairwise_run_sharing_no_scenario_is_refused_before_the_model_loads(compose, tmp_path):
    """Ids that match none of this run's scenarios, or a shared scenario that differs, are named when the test
    records are read, before generating (pairwise judging would compare nothing, or other scenarios)."""
    from omegaconf import open_dict

    from rpbench.core.errors import ConfigError
    from rpbench.pipeline import run
    from rpbench.validate import validate

    other = tmp_path / "other"
    other.mkdir()
    conversations = other / "conversations.jsonl"
    conversations.write_text(json.dumps(SESSION | {"id": "elsewhere"}) + "\n")
    cfg = compose("data=sample_conversation", "objective=none", "judge=local", f"evaluator.pairwise_with={other}")
    with open_dict(cfg):
        del cfg["hydra"]
    with pytest.raises(ConfigError, match=r"shares no scenario id with this run's test records \(it has elsewhere\)"):
        run(validate(cfg))
    first = readers.read("conversation", "test", package_path(cfg.data.files.test), NO_RUBRICS).examples[0]
    same = {k: first.meta[k] for k in ("character", "card", "persona")}
    conversations.write_text(json.dumps(SESSION | same | {"id": first.id, "goal": "another"}) + "\n")
    with pytest.raises(ConfigError, match=rf"conversations\.jsonl: record {first.id}: field 'goal': the same scenario"):
        run(validate(cfg))


def test_a_simulator_without_a_usable_reply_ends_the_session_and_one_that_never_answers_fails_the_run(
    tmp_path, chat_stub, run
):
    """The simulator answers blank (Lena's session) or 503 (the others): every session ends after one turn, is not
    judged, and the run has nothing to score: RunFailed, metrics.json marked failed with the simulator's requests
    and failures, the warning on record, and the leaderboard skips it."""
    from rpbench.leaderboard import build
    from rpbench.pipeline import RunFailed

    def reply(body: dict) -> str | int:
        if "Write only your next message" in body["messages"][-1]["content"]:
            return "   " if "Lena" in body["messages"][-1]["content"] else 503
        return scripted()(body)

    with chat_stub(reply) as stub:
        model = ["evaluator.backend=endpoint", f"evaluator.endpoint.base_url={stub.url}", "evaluator.endpoint.model=m"]
        with pytest.raises(RunFailed, match=r"every request of simulator \(6 of 6\) failed"):
            run(tmp_path / "run", stub, *model, "evaluator.drift.enabled=false")
        requests = stub.requests
    results = json.loads((tmp_path / "run" / "metrics.json").read_text())
    c = results["eval"]["conversation"]
    assert c["ended_by"] == {"simulator_error": 6} and c["sessions_cut_short"] == {"simulator_error": 6}
    assert c["simulator_errors"]["rolemrc-mara-phone"] == "turn 1: an empty reply"
    assert "503" in c["simulator_errors"]["rpgbench-greta-room"]
    sessions = lines(tmp_path / "run" / "conversations.jsonl")
    assert all(s["n_character_turns"] == 1 for s in sessions)  # kept in the run folder, not judged
    assert c["judge"]["overall"]["n"] == 0 and c["judge"]["overall"]["mean"] is None
    assert not [r for r in requests if "Judge only the character" in r["messages"][-1]["content"]]
    health = results["eval"]["endpoints"]["simulator"]
    assert (health["requests"], health["failures"], health["threshold"]) == (6, 6, 0.0)
    assert health["warning"] in results["warnings"] and results["failed"].startswith("evaluator=conversation: ")
    report = (tmp_path / "run" / "report.md").read_text()
    assert "6 sessions cut short (simulator_error 6) (not judged)" in report and results["failed"] in report
    assert [why for _, why in build([tmp_path]).skipped] == [f"failed: {results['failed']}"]
