"""The chat client against the real rpbench server on 127.0.0.1 (with injected faults: tests/scripted_server.py)."""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import formatdate, parsedate_to_datetime

import pytest
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError
from rpbench.scoring.chat.client import ChatClient, ChatRequest, EndpointConfigError, EndpointSettings, open_client
from rpbench.scoring.judge.parse import parse_verdict
from rpbench.serve.model import load_served_model
from rpbench.serve.running import local_judge, serve_in_thread


@pytest.fixture(scope="module")
def tiny():
    return load_served_model("tiny-qwen2")


def requests_for(*questions: str, version: str = "test-v1") -> list[ChatRequest]:
    return [ChatRequest(({"role": "user", "content": q},), 6, version) for q in questions]


@pytest.fixture(scope="module")
def client_for(judge_config):
    def client_for(server, tmp_path=None, **overrides) -> ChatClient:
        settings = {
            "model": server.model_name,
            "base_url": server.base_url,
            "api_key_env": None,
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
            "progress": False,
            "timeout_s": 30,
            "cache_path": str(tmp_path / "cache.sqlite") if tmp_path else None,
            **overrides,
        }
        return ChatClient(judge_config(**settings))

    return client_for


def test_second_run_is_served_from_the_cache(tiny, tmp_path, client_for):
    asks = requests_for("Who are you?", "Where do you live?", "What do you like?")
    with serve_in_thread(tiny) as server:
        first = client_for(server, tmp_path, price_input_per_1m=2.0, price_output_per_1m=4.0)
        replies = first.ask_many(asks)
        assert server.stats.requests == 3
        assert all(r.error is None and not r.cached for r in replies)
        stats = first.stats
        assert stats.requests == stats.replies == 3 and stats.cache_hits == 0
        assert stats.prompt_tokens == sum(r.prompt_tokens for r in replies) > 0
        assert stats.cost_usd == pytest.approx((stats.prompt_tokens * 2.0 + stats.completion_tokens * 4.0) / 1e6)
        first.close()

        again = client_for(server, tmp_path, price_input_per_1m=2.0, price_output_per_1m=4.0)
        cached = again.ask_many(asks)
        assert server.stats.requests == 3  # nothing new reached the server
        assert [r.text for r in cached] == [r.text for r in replies]
        assert all(r.cached for r in cached)
        assert again.stats.cache_hits == 3 and again.stats.requests == 0 and again.stats.cost_usd == 0

        again.ask_many(requests_for("Who are you?", version="test-v2"))  # a new prompt version is a new key
        assert server.stats.requests == 4
        again.close()


def test_injected_429_and_500_are_retried(tiny, scripted, client_for):
    with serve_in_thread(tiny, make_server=scripted(faults=["429", "500"], replies={"?": "1"})) as server:
        client = client_for(server, max_retries=3, concurrency=1)
        replies = client.ask_many(requests_for("a?", "b?", "c?"))
    assert [r.text for r in replies] == ["1", "1", "1"]
    assert server.stats.requests == 5
    assert client.stats.retries == 2 and client.stats.requests == 5 and client.stats.failures == 0


def test_exhausted_retries_are_reported_not_raised(tiny, scripted, client_for):
    with serve_in_thread(tiny, make_server=scripted(faults=["500", "500", "500"])) as server:
        client = client_for(server, max_retries=1)
        [reply] = client.ask_many(requests_for("a?"))
    assert reply.text is None and reply.error == "HTTP 500"
    assert server.stats.requests == 2 and client.stats.failures == 1


@pytest.mark.slow
def test_a_slow_reply_times_out_and_is_retried(tiny, scripted, client_for):
    slow = scripted(faults=["slow"], slow_s=1.0, replies={"?": "0"})
    with serve_in_thread(tiny, make_server=slow) as server:
        client = client_for(server, timeout_s=0.3, max_retries=1)
        [reply] = client.ask_many(requests_for("a?"))
        assert reply.text == "0" and client.stats.retries == 1 and server.stats.requests == 2
    with serve_in_thread(tiny, make_server=slow) as server:
        client = client_for(server, timeout_s=0.3, max_retries=0)
        [reply] = client.ask_many(requests_for("a?"))
        assert reply.error == "timeout" and client.stats.failures == 1


@pytest.mark.slow
def test_an_endpoint_refusing_one_request_stops_the_batch_s_others(tiny, scripted, client_for):
    """The first request to arrive is refused (404: a model the endpoint does not serve); the three others, slow,
    are cancelled with it, not left running in the caller's event loop to report late failures."""
    slow_s = 1.0
    seen = []

    async def ask_then_wait(client):
        with pytest.raises(EndpointConfigError, match="refused the request .NotFoundError, status 404"):
            await client.ajudge_many(requests_for("a?", "b?", "c?", "d?"), on_result=lambda i, r: seen.append(i))
        await asyncio.sleep(slow_s * 2)  # the loop runs on: a request left running would finish in here

    with serve_in_thread(tiny, make_server=scripted(faults=["404"] + ["slow"] * 3, slow_s=slow_s)) as server:
        client = client_for(server, concurrency=4, max_retries=0)
        asyncio.run(ask_then_wait(client))
    assert seen == [] and client.stats.replies == 0 and client.stats.failures == 0


@pytest.mark.slow
@pytest.mark.parametrize("limit", [2, 4])
def test_concurrency_limit_is_respected(tiny, limit, scripted, client_for):
    slow = scripted(faults=["slow"] * 8, slow_s=0.25, replies={"?": "1"})
    with serve_in_thread(tiny, make_server=slow) as server:
        client = client_for(server, concurrency=limit)
        replies = client.ask_many(requests_for(*(f"q{i}?" for i in range(8))))
        assert server.stats.max_in_flight == limit
    assert all(r.text == "1" for r in replies)


def test_re_ask_until_parsed_then_count_a_parse_failure(tiny, scripted, client_for):
    reask = "Please answer with one digit."
    replies = {"good?": "1", "hopeless?": "no idea", reask: "still no idea"}
    with serve_in_thread(tiny, make_server=scripted(replies=replies)) as server:
        client = client_for(server, parse_tries=3)
        parsed = client.ask_parsed(requests_for("good?", "hopeless?"), parse_verdict, reask)
        assert server.stats.requests == 1 + 3
    assert (parsed[0].value, parsed[0].attempts, parsed[0].status) == (1, 1, "ok")
    assert (parsed[1].value, parsed[1].attempts, parsed[1].status) == (None, 3, "parse_failure")
    assert parsed[1].text == "still no idea"


def test_another_server_under_the_same_model_name_is_asked_again(tmp_path, chat_stub, judge_config):
    """The cache keys replies by endpoint too: the second server's verdicts, not the first one's."""
    asks = requests_for("Who are you?", "Where do you live?")
    with chat_stub(lambda body: "1") as first, chat_stub(lambda body: "0") as second:
        for server, verdict in ((first, "1"), (second, "0"), (first, "1")):
            client = ChatClient(judge_config(**stub_settings(server, tmp_path)))
            assert [r.text for r in client.ask_many(asks)] == [verdict] * 2
            client.close()
        assert len(first.requests) == len(second.requests) == 2  # the third pass was the first server's cache


def test_a_local_judge_started_again_on_another_port_answers_from_the_cache(compose, tmp_path):
    values = OmegaConf.to_container(compose("judge=local").judge, resolve=True)
    judge = EndpointSettings.parse({**values, "progress": False, "cache_path": str(tmp_path / "cache.sqlite")}, "judge")
    asks = requests_for("Who are you?")
    runs = []
    for _ in range(2):
        with open_client(judge, local_judge) as client:
            runs.append((client.config.base_url, client.ask_many(asks)[0], client.stats.requests))
    (first_url, first, asked), (second_url, second, asked_again) = runs
    assert first_url != second_url and (asked, asked_again) == (1, 0)
    assert second.cached and second.text == first.text


def stub_settings(server, tmp_path) -> dict:
    return {"model": "judge", "base_url": server.url, "progress": False, "cache_path": str(tmp_path / "cache.sqlite")}


def test_api_key_comes_from_the_environment_and_is_never_stored(tiny, tmp_path, monkeypatch, scripted, client_for):
    secret = "sk-test-not-a-real-key-4a7f"
    monkeypatch.setenv("RPBENCH_TEST_JUDGE_KEY", secret)
    with serve_in_thread(tiny, make_server=scripted(replies={"?": "1"})) as server:
        client = client_for(server, tmp_path, api_key_env="RPBENCH_TEST_JUDGE_KEY")
        client.ask_many(requests_for("a?"))
        client.close()
    assert secret not in repr(client.config) and secret not in repr(client.stats)
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert stored  # the reply was cached
    assert secret.encode() not in stored


def test_openai_endpoint_without_a_key_fails_fast_naming_the_variable(monkeypatch, judge_config):
    monkeypatch.delenv("RPBENCH_ABSENT_KEY", raising=False)
    with pytest.raises(EndpointConfigError, match="RPBENCH_ABSENT_KEY"):
        ChatClient(judge_config(backend="openai", model="gpt-4o-mini", base_url=None, api_key_env="RPBENCH_ABSENT_KEY"))


def test_config_rejects_unknown_and_missing_keys_naming_them(judge_settings):
    with pytest.raises(ConfigError, match=r"judge\.temprature: unknown key"):
        EndpointSettings.parse({**judge_settings(model="m"), "temprature": 0.7}, "judge")
    settings = judge_settings(model="m")
    del settings["retry_after_max_s"]
    with pytest.raises(ConfigError, match=r"judge\.retry_after_max_s: missing \(it has no default in code"):
        EndpointSettings.parse(settings, "judge")


BAD_REPLIES = [
    ("truncated_json", "bad reply: body is not JSON (application/json"),
    ("wrong_shape", "bad reply: JSON without choices[0].message.content"),
    ("html", "bad reply: body is not JSON (text/html"),
]


def test_bad_replies_are_retried_like_server_errors(tiny, scripted, client_for):
    faults = [fault for fault, _ in BAD_REPLIES]
    with serve_in_thread(tiny, make_server=scripted(faults=faults, replies={"?": "1"})) as server:
        client = client_for(server, max_retries=3)
        [reply] = client.ask_many(requests_for("a?"))
        assert server.stats.requests == 4
    assert reply.text == "1" and reply.error is None
    stats = client.stats
    assert (stats.bad_replies, stats.retries, stats.replies, stats.failures) == (3, 3, 1, 0)


@pytest.mark.parametrize(("fault", "reason"), BAD_REPLIES)
def test_a_bad_reply_after_all_retries_is_a_counted_request_failure(tiny, fault, reason, scripted, client_for):
    with serve_in_thread(tiny, make_server=scripted(faults=[fault, fault], replies={"?": "1"})) as server:
        client = client_for(server, max_retries=1, concurrency=1)
        parsed = client.ask_parsed(requests_for("a?", "b?"), parse_verdict, "Answer 0 or 1.")
        assert server.stats.requests == 3
    assert [p.status for p in parsed] == ["request_failure", "ok"]
    assert parsed[0].value is None and parsed[0].error.startswith(reason)
    assert parsed[1].value == 1
    assert (client.stats.bad_replies, client.stats.failures) == (2, 1)


def test_retry_after_in_seconds_is_waited_for(tiny, scripted, client_for):
    with serve_in_thread(tiny, make_server=scripted(faults=["429"], retry_after="1", replies={"?": "1"})) as server:
        client = client_for(server, max_retries=2)  # backoff alone would wait 0.005-0.01 s
        [reply] = client.ask_many(requests_for("a?"))
        first, second = server.stats.arrivals
    assert reply.text == "1" and client.stats.retries == 1
    assert second - first >= 1.0 and client.stats.retry_wait_s >= 1.0


def test_retry_after_as_an_http_date_is_waited_for(tiny, scripted, client_for):
    not_before = time.time() + 2
    when = formatdate(not_before, usegmt=True)  # whole seconds: 1-2 s from now
    with serve_in_thread(tiny, make_server=scripted(faults=["503"], retry_after=when, replies={"?": "1"})) as server:
        client = client_for(server, max_retries=2)
        [reply] = client.ask_many(requests_for("a?"))
        first, second = server.stats.arrivals
    assert reply.text == "1"
    assert second >= parsedate_to_datetime(when).timestamp() > first


def test_retry_after_is_capped_by_the_configured_maximum(tiny, scripted, client_for):
    late = scripted(faults=["429"], retry_after="3600", replies={"?": "1"})
    with serve_in_thread(tiny, make_server=late) as server:
        client = client_for(server, max_retries=2, retry_after_max_s=0.2)
        [reply] = client.ask_many(requests_for("a?"))
    assert reply.text == "1" and client.stats.retry_wait_s == pytest.approx(0.2)


def test_evaluation_with_a_judge_sending_bad_replies_completes_and_counts_them(
    tmp_path, run_in_process, scripted_judge
):
    """run.py end to end: the judge's first three requests get bad replies twice (max_retries=1)."""
    out = tmp_path / "run"
    faults = ["html", "html", "truncated_json", "truncated_json", "wrong_shape", "wrong_shape"]
    run_in_process(
        out,
        "objective=none",
        "trainer.enable_progress_bar=false",
        "evaluator=rolemrc",
        "evaluator.metrics=[bleu]",
        "data.max_test_samples=3",
        "evaluator.generation.max_new_tokens=4",
        "judge=local",
        "judge.concurrency=1",
        "judge.max_retries=1",
        "judge.backoff_initial_s=0.01",
        "judge.progress=false",
        f"paths.output_root={tmp_path}",
        local_judge_server=scripted_judge(faults=faults, replies={"": "1"}),
    )
    judge = json.loads((out / "metrics.json").read_text())["eval"]["judge"]
    overall = judge["overall"]
    assert overall["request_failures"] == 3 and overall["parse_failures"] == 0
    assert overall["judged"] == overall["n"] - 3 > 0 and overall["accuracy"] == 1.0
    stats = judge["judge_stats"]
    assert (stats["bad_replies"], stats["failures"], stats["retries"]) == (6, 3, 3)
    records = [json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()]
    failed = [r["replies"][k] for r in records for k, s in r["status"].items() if s == "request_failure"]
    assert len(failed) == 3 and all(reason.startswith("bad reply: ") for reason in failed)
