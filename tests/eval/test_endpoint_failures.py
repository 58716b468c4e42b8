"""Every endpoint role (judge, user simulator, endpoint generation) against the faults of a real server on
127.0.0.1: counted per role, warned about above its threshold, and a result resting on nothing is marked so;
and the bounds of item 4: replies within the model's context, a turn cap, prompts within a character limit.

The faults served by a ``chat_stub`` on 127.0.0.1 (``fault_reply``): HTTP 500, a reply slower than the client's
timeout, cut-off JSON, an HTML page, empty and null content, and a refused connection (a port nothing listens
on: ``refused_url``)."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from rpbench.core.errors import ConfigError
from rpbench.data import readers
from rpbench.data.conversation_session import Session
from rpbench.data.files import package_path
from rpbench.data.readers import NoRubrics
from rpbench.scoring.chat.client import ChatRequest, counting_usage, open_client
from rpbench.scoring.chat.health import no_verdict, rests_on_nothing, role_health

SAMPLE = package_path("pkg://rpbench/resources/sample/conversation/scenarios.jsonl")
FAULTS = ("500", "timeout", "cut_json", "html", "empty", "null", "refused")
TIMEOUT_S = 0.5  # the client's timeout_s in these tests: a "timeout" reply comes later
REQUEST_FAULTS = [f for f in FAULTS if f not in ("empty", "null")]  # the client itself gets no reply


@pytest.fixture(scope="module")
def fault_reply(RawReply):
    """What a faulty endpoint answers (``refused`` has no server: see ``refused_url``)."""

    def fault_reply(fault: str):
        if fault == "500":
            return 500
        if fault == "timeout":
            time.sleep(3 * TIMEOUT_S)
            return "too late"
        if fault == "cut_json":
            whole = json.dumps({"choices": [{"message": {"role": "assistant", "content": "4"}}]})
            return RawReply(whole[: len(whole) // 2].encode(), "application/json")
        if fault == "html":
            return RawReply(b"<html><body>502 Bad Gateway</body></html>", "text/html")
        if fault == "empty":
            return ""
        if fault == "null":
            return None
        raise ValueError(f"no served fault {fault!r}")

    return fault_reply


def refused_url() -> str:
    """An address on 127.0.0.1 where nothing listens (a connection there is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def scenarios():
    return readers.read("conversation", "test", SAMPLE, NoRubrics(task_dimensions=None)).examples


def character(body: dict) -> str:
    return "The tides are kind today."


@pytest.fixture(scope="module")
def served(chat_stub):
    """A stub answering ``reply``, or for ``refused`` none (its URL refuses connections)."""

    def served(fault: str, reply):
        from contextlib import nullcontext

        if fault == "refused":
            return nullcontext(None)
        return chat_stub(reply)

    return served


def test_role_health_warns_above_its_threshold_and_names_a_role_that_answered_nothing(caplog):
    assert role_health("judge", 10, 0, 0.0, "judge.warn_request_failure_rate")["warning"] is None
    half = role_health("simulator", 4, 2, 0.5, "judge.warn_request_failure_rate")
    assert half["rate"] == 0.5 and half["warning"] is None  # 50% is not above 50%
    entry = role_health("simulator", 4, 3, 0.5, "judge.warn_request_failure_rate")
    assert entry["requests"] == 4 and entry["failures"] == 3 and entry["rate"] == 0.75 and entry["threshold"] == 0.5
    assert "3 of 4 user simulator requests" in entry["warning"] and "75%" in entry["warning"]
    assert entry["warning"] in caplog.text
    assert rests_on_nothing({"simulator": entry}) is None
    dead = role_health("judge", 6, 6, 0.0, "judge.warn_request_failure_rate")
    assert rests_on_nothing({"simulator": entry, "judge": dead}) == ("every request of judge (6 of 6) failed")
    assert role_health("generation", 0, 0, 0.0, None)["rate"] is None
    assert no_verdict(3, 2, 1) is not None and no_verdict(3, 2, 0) is None and no_verdict(0, 0, 0) is None


@pytest.fixture(scope="module")
def conversation_run(tmp_path_factory, chat_stub, composed, evaluation_of):
    """evaluator=conversation's context, the evaluated model an endpoint on 127.0.0.1 answering a line (composed
    once: each test hands its own simulator and folder)."""
    from hydra.core.global_hydra import GlobalHydra

    with chat_stub(character) as model:
        cfg = composed(
            tmp_path_factory.mktemp("run"),
            "data=sample_conversation",
            "objective=none",
            "evaluator=conversation",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={model.url}",
            "evaluator.endpoint.model=m",
            "evaluator.generation.progress=false",
            "judge=vllm",
            f"judge.base_url={model.url}",
            "judge.api_key_env=null",
            "judge.max_retries=0",
            f"judge.timeout_s={TIMEOUT_S}",
            "judge.cache_path=null",
            "judge.progress=false",
        )
        try:
            yield evaluation_of(cfg, tmp_path_factory.mktemp("eval"), examples=scenarios())
        finally:
            GlobalHydra.instance().clear()


@pytest.mark.parametrize("fault", FAULTS)
class TestEveryEndpointRoleAgainstAFaultyServer:
    """Each endpoint role against a server on 127.0.0.1 that answers every request with ``fault``."""

    @pytest.mark.slow
    def test_a_user_simulator_that_fails_every_request_ends_every_session_counted(
        self, conversation_run, tmp_path, fault, served, fault_reply
    ):
        """Every session ends after one turn, each simulator request is counted as failed, and nothing is left to
        rest a result on."""
        from dataclasses import replace

        from rpbench.eval.benchmarks.conversation.evaluator import simulator_health
        from rpbench.eval.benchmarks.conversation.sessions import run_sessions
        from rpbench.scoring.judge.conversation import open_simulator, simulator_version

        ctx = conversation_run.into(tmp_path)
        with served(fault, lambda body: fault_reply(fault)) as sim:
            own = replace(ctx.settings.simulator, base_url=refused_url() if sim is None else sim.url, model="user")
            with open_client(ctx.judge) as judge, open_simulator(judge, own, None, "s") as simulator:
                sessions, _, counts = run_sessions(ctx, simulator, simulator_version())
        assert [s.ended_by for s in sessions] == ["simulator_error"] * 6
        assert all(s.character_turns == 1 for s in sessions)
        assert counts["simulator_requests"] == counts["simulator_failures"] == 6
        health = simulator_health(counts, ctx.judge.warn_request_failure_rate)
        assert health["warning"] is not None and health["threshold"] == 0.0
        assert rests_on_nothing({"simulator": health}) == "every request of simulator (6 of 6) failed"

    def test_a_session_judge_that_fails_every_request_gives_no_verdict(self, fault, judge_config, served, fault_reply):
        """A failed request or, for an empty or null reply, a parse failure: either way no verdict, every
        request counted as failed under the judge's role (warned about), and a result resting on nothing."""
        from types import SimpleNamespace

        from rpbench.eval.evaluate import endpoint_health
        from rpbench.scoring.judge.conversation import judge_sessions

        sessions = [Session.start(e, 20) for e in scenarios()[:2]]
        for s in sessions:
            s.add_reply("Aye.")
        records = [s.record() for s in sessions]
        with served(fault, lambda body: fault_reply(fault)) as stub:
            url = refused_url() if stub is None else stub.url
            config = judge_config(base_url=url, model="j", max_retries=0, timeout_s=TIMEOUT_S, parse_tries=1)
            with counting_usage() as usage, open_client(config) as client:
                judgements = judge_sessions(client, records, {"consistency": "Does it stay in role?"}, 64)
        statuses = [j["status"] for j in judgements]
        stats = usage.roles["judge"]
        assert stats.asked == 2 and set(usage.roles) == {"judge"}
        if fault in REQUEST_FAULTS:
            assert statuses == ["request_failure"] * 2 and stats.failures == 2
        else:
            assert statuses == ["parse_failure"] * 2 and stats.failures == 0 and stats.empty_replies == 2
        health = endpoint_health(SimpleNamespace(judge=config), usage, {})["judge"]
        assert (health["requests"], health["failures"], health["threshold"]) == (2, 2, 0.0)
        assert "judge: 2 of 2 judge requests got no usable reply" in health["warning"]
        assert rests_on_nothing({"judge": health}) == "every request of judge (2 of 2) failed"
        assert no_verdict(2, statuses.count("parse_failure"), statuses.count("request_failure")) is not None

    def test_endpoint_generation_is_counted_and_a_failed_request_stops_the_run(
        self, tmp_path, fault, generation_endpoint, generation_options, served, fault_reply
    ):
        """A failed generation request owes a prediction: the run stops (a user error naming how many); an empty
        reply is an empty prediction. Either way the requests are counted under the generation role."""
        from rpbench.core.errors import RpbenchError
        from rpbench.data.records import EvalExample, Turn
        from rpbench.eval.generate import generate_via_endpoint

        examples = [
            EvalExample(id=f"ex{i}", prompt=(Turn("user", f"hi {i}"),), reference="r", task="t") for i in (0, 1)
        ]
        with served(fault, lambda body: fault_reply(fault)) as stub:
            url = refused_url() if stub is None else stub.url
            endpoint = generation_endpoint(url, "m", max_retries=0, timeout_s=TIMEOUT_S)
            with counting_usage() as usage:
                if fault == "empty":
                    generate_via_endpoint(endpoint, examples, tmp_path / "p.jsonl", generation_options())
                else:
                    with pytest.raises(RpbenchError, match=r"2 of 2 endpoint requests failed"):
                        generate_via_endpoint(endpoint, examples, tmp_path / "p.jsonl", generation_options())
        stats = usage.roles["generation"]
        assert stats.asked == 2 and stats.failures == (0 if fault in ("empty", "null") else 2)


def test_a_run_rests_on_nothing_when_a_headline_has_no_value():
    from rpbench.eval.benchmarks import BENCHMARKS

    [headline] = BENCHMARKS.get("conversation").headlines
    assert headline.unscored({"conversation": {"judge": {"overall": {"mean": None, "n": 0}}}})
    assert not headline.unscored({"conversation": {"judge": {"overall": {"mean": 3.2, "n": 4}}}})
    assert not headline.unscored({"metrics": {}})  # not held: nothing to say
    rolemrc = BENCHMARKS.get("rolemrc").headlines
    assert rolemrc[0].unscored({"judge": {"overall": {"accuracy": None}}})
    assert not rolemrc[1].unscored({"judge": {"overall": {"accuracy": None}}})  # ROUGE-L not held


def test_sessions_cut_short_by_the_simulator_are_left_out_of_the_means_and_counted(
    compose, tmp_path, evaluation_of, chat_stub, judge_config
):
    """Two whole sessions judged 4 and 2, one cut short by the simulator (never judged): the means are over the
    two (3.0), the third counted beside them."""
    from dataclasses import replace

    from rpbench.eval.benchmarks.conversation.evaluator import judge_complete, measure, summaries, turn_flags

    cfg = compose("data=sample_conversation", "objective=none", "evaluator=conversation", "judge=local")
    ev = evaluation_of(cfg, tmp_path).settings
    ev = replace(ev, rubric={"consistency": "Does it stay in role?"}, drift=replace(ev.drift, enabled=False))
    sessions = [Session.start(e, 20) for e in scenarios()[:3]]
    for s in sessions:
        s.add_reply("Aye.")
    sessions[0].take_user_reply("", "HTTP 500", 1, "[END]")
    score = iter([4, 2])

    def judge(body: dict) -> str:
        return json.dumps({"scores": {"consistency": next(score)}, "breaks": []})

    with chat_stub(judge) as stub, open_client(judge_config(base_url=stub.url, model="j", max_retries=0)) as client:
        judgements = judge_complete(client, sessions, [s.record() for s in sessions], ev.rubric, 64)
        judged = len(stub.requests)
    assert judged == 2 and judgements[0]["status"] == "simulator_error"
    measured = measure(ev, sessions)
    flags = [{"id": s.id, "flags": turn_flags(j, measured[s.id])} for s, j in zip(sessions, judgements)]
    c = summaries(ev, sessions, judgements, measured, flags)
    assert c["judge"]["overall"]["mean"] == 3.0 and c["judge"]["overall"]["n"] == 2
    assert c["sessions_cut_short"] == {"simulator_error": 1} and c["ended_by"]["simulator_error"] == 1


def test_a_reply_longer_than_the_model_s_context_is_refused_at_startup(compose):
    """tiny-qwen2's context is 2048 positions (max_position_embeddings): 10^12 new tokens, or 2048, are refused
    before anything loads; 2047 leaves the prompt one."""
    from rpbench.validate import validate

    for n in (10**12, 2048):
        with pytest.raises(ConfigError, match=rf"evaluator.generation.max_new_tokens={n}: .*context of 2048 tokens"):
            validate(compose("objective=none", f"evaluator.generation.max_new_tokens={n}"))
    validate(compose("objective=none", "evaluator.generation.max_new_tokens=2047"))
    # an endpoint generates: its server bounds its replies, and the run's model is not the one generating
    validate(
        compose(
            "objective=none",
            "evaluator.backend=endpoint",
            "evaluator.endpoint.base_url=http://127.0.0.1:1/v1",
            "evaluator.endpoint.model=m",
            f"evaluator.generation.max_new_tokens={10**12}",
        )
    )


def test_a_loaded_model_s_prompts_leave_room_for_the_reply_in_its_context(generation_options):
    from types import SimpleNamespace

    from transformers import Qwen2Config

    from rpbench.eval.generate import prompt_budget

    model = SimpleNamespace(config=Qwen2Config(max_position_embeddings=100))
    tokenizer = SimpleNamespace(model_max_length=8192)
    key = "evaluator.generation.max_new_tokens"
    assert prompt_budget(model, tokenizer, generation_options(max_new_tokens=30, max_prompt_length=None), key) == 70
    assert prompt_budget(model, tokenizer, generation_options(max_new_tokens=30, max_prompt_length=50), key) == 50
    # the error names the setting it is given (the R-EMID reasoner's is another key)
    thoughts = "evaluator.generalization.reasoning.max_new_tokens"
    with pytest.raises(ConfigError, match=f"^{re.escape(thoughts)}=100: model SimpleNamespace has a context of 100"):
        prompt_budget(model, tokenizer, generation_options(max_new_tokens=100, max_prompt_length=None), thoughts)


def test_the_turn_cap_has_a_default_and_bounds_a_scenario_that_asks_for_more(compose, tmp_path):
    """A scenario asking for 10^9 turns runs at most evaluator.max_turns (20 by default), counted as capped; the
    judge estimate counts as many requests; a null cap is refused at startup."""
    from dataclasses import replace

    from rpbench.eval.benchmarks import BENCHMARKS
    from rpbench.validate import validate

    spec = validate(compose("data=sample_conversation", "objective=none", "evaluator=conversation", "judge=local"))
    assert spec.evaluator.max_turns == 20
    endless = replace(scenarios()[0], meta={**scenarios()[0].meta, "turns": 10**9})
    session = Session.start(endless, spec.evaluator.max_turns)
    assert session.limit == 20 and session.capped and not Session.start(scenarios()[0], 20).capped
    for _ in range(20):
        session.add_reply("Aye.")
    assert session.ended_by == "turn_limit"
    assert BENCHMARKS.get("conversation").judge_requests(spec.evaluator, [endless]) == [20]
    with pytest.raises(ConfigError, match=r"evaluator.max_turns"):
        validate(
            compose(
                "data=sample_conversation",
                "objective=none",
                "evaluator=conversation",
                "judge=local",
                "evaluator.max_turns=null",
            )
        )


def test_a_prompt_beyond_the_character_limit_is_not_sent_and_counted(group_values, chat_stub, judge_config):
    """A 2 MB character card goes to the session judge, a 2 MB persona to the user simulator: each request is a
    counted failure naming judge.max_prompt_chars, and the server never sees it; a prompt within the limit goes."""
    from dataclasses import replace

    from rpbench.scoring.judge.conversation import Simulator, ask_simulator, judge_sessions, open_simulator

    huge, example = "x" * 2_000_000, scenarios()[0]
    sessions = [Session.start(replace(example, meta={**example.meta, key: huge}), 20) for key in ("card", "persona")]
    for s in sessions:
        s.add_reply("Aye.")
    simulator = Simulator.parse(group_values("evaluator", "conversation", "evaluator.simulator"), "s")
    with chat_stub(lambda body: "fine") as stub:
        config = judge_config(base_url=stub.url, model="j", max_retries=0, max_prompt_chars=10_000)
        with counting_usage() as usage, open_client(config) as client:
            big, short = client.ask_many(
                [
                    ChatRequest(({"role": "user", "content": huge},), 8, "v"),
                    ChatRequest(({"role": "user", "content": "short"},), 8, "v"),
                ]
            )
            [judged] = judge_sessions(client, [sessions[0].record()], {"consistency": "In role?"}, 64)
            with open_simulator(client, simulator, None, "s") as asker:
                [asked] = ask_simulator(asker, sessions[1:], 1, "[END]", 8, "v")
        sent = stub.requests
    assert big.text is None and "2000000 characters, above judge.max_prompt_chars=10000" in big.error
    assert short.text == "fine" and [r["messages"][0]["content"] for r in sent] == ["short"]
    assert judged["status"] == "request_failure"
    assert asked.text is None and "above judge.max_prompt_chars=10000 (not sent)" in asked.error
    assert usage.roles["judge"].prompts_too_long == 2 and usage.roles["simulator"].prompts_too_long == 1
    assert usage.roles["judge"].failures == 2 and usage.roles["judge"].asked == 3
