"""The judge client against the real rpbench server on 127.0.0.1 (with injected faults)."""

from __future__ import annotations

import pytest

from rpbench.eval.judge.client import JudgeClient, JudgeConfig, JudgeConfigError, JudgeRequest
from rpbench.eval.judge.parse import parse_verdict
from rpbench.serve import load_served_model, serve_in_thread


@pytest.fixture(scope="module")
def tiny():
    return load_served_model("tiny-qwen2")


def requests_for(*questions: str, version: str = "test-v1") -> list[JudgeRequest]:
    return [JudgeRequest(({"role": "user", "content": q},), 6, version) for q in questions]


def client_for(server, tmp_path=None, **overrides) -> JudgeClient:
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
    return JudgeClient(JudgeConfig.from_mapping(settings))


def test_second_run_is_served_from_the_cache(tiny, tmp_path):
    asks = requests_for("Who are you?", "Where do you live?", "What do you like?")
    with serve_in_thread(tiny) as server:
        first = client_for(server, tmp_path, price_input_per_1m=2.0, price_output_per_1m=4.0)
        replies = first.judge_many(asks)
        assert server.stats.requests == 3
        assert all(r.error is None and not r.cached for r in replies)
        stats = first.stats
        assert stats.requests == stats.replies == 3 and stats.cache_hits == 0
        assert stats.prompt_tokens == sum(r.prompt_tokens for r in replies) > 0
        assert stats.cost_usd == pytest.approx((stats.prompt_tokens * 2.0 + stats.completion_tokens * 4.0) / 1e6)
        first.close()

        again = client_for(server, tmp_path, price_input_per_1m=2.0, price_output_per_1m=4.0)
        cached = again.judge_many(asks)
        assert server.stats.requests == 3  # nothing new reached the server
        assert [r.text for r in cached] == [r.text for r in replies]
        assert all(r.cached for r in cached)
        assert again.stats.cache_hits == 3 and again.stats.requests == 0 and again.stats.cost_usd == 0

        again.judge_many(requests_for("Who are you?", version="test-v2"))  # a new prompt version is a new key
        assert server.stats.requests == 4
        again.close()


def test_injected_429_and_500_are_retried(tiny):
    with serve_in_thread(tiny, {"faults": ["429", "500"], "scripted": [{"match": "?", "reply": "1"}]}) as server:
        client = client_for(server, max_retries=3, concurrency=1)
        replies = client.judge_many(requests_for("a?", "b?", "c?"))
    assert [r.text for r in replies] == ["1", "1", "1"]
    assert server.stats.requests == 5
    assert client.stats.retries == 2 and client.stats.requests == 5 and client.stats.failures == 0


def test_exhausted_retries_are_reported_not_raised(tiny):
    with serve_in_thread(tiny, {"faults": ["500", "500", "500"]}) as server:
        client = client_for(server, max_retries=1)
        [reply] = client.judge_many(requests_for("a?"))
    assert reply.text is None and reply.error == "HTTP 500"
    assert server.stats.requests == 2 and client.stats.failures == 1


def test_a_slow_reply_times_out_and_is_retried(tiny):
    options = {"faults": ["slow"], "slow_s": 1.0, "scripted": [{"match": "?", "reply": "0"}]}
    with serve_in_thread(tiny, options) as server:
        client = client_for(server, timeout_s=0.3, max_retries=1)
        [reply] = client.judge_many(requests_for("a?"))
        assert reply.text == "0" and client.stats.retries == 1 and server.stats.requests == 2
    with serve_in_thread(tiny, options) as server:
        client = client_for(server, timeout_s=0.3, max_retries=0)
        [reply] = client.judge_many(requests_for("a?"))
        assert reply.error == "timeout" and client.stats.failures == 1


@pytest.mark.parametrize("limit", [2, 4])
def test_concurrency_limit_is_respected(tiny, limit):
    options = {"faults": ["slow"] * 8, "slow_s": 0.25, "scripted": [{"match": "?", "reply": "1"}]}
    with serve_in_thread(tiny, options) as server:
        client = client_for(server, concurrency=limit)
        replies = client.judge_many(requests_for(*(f"q{i}?" for i in range(8))))
        assert server.stats.max_in_flight == limit
    assert all(r.text == "1" for r in replies)


def test_re_ask_until_parsed_then_count_a_parse_failure(tiny):
    reask = "Please answer with one digit."
    options = {
        "scripted": [
            {"match": "good?", "reply": "1"},
            {"match": "hopeless?", "reply": "no idea"},
            {"match": reask, "reply": "still no idea"},
        ]
    }
    with serve_in_thread(tiny, options) as server:
        client = client_for(server, parse_tries=3)
        parsed = client.judge_parsed(requests_for("good?", "hopeless?"), parse_verdict, reask)
        assert server.stats.requests == 1 + 3
    assert (parsed[0].value, parsed[0].attempts, parsed[0].status) == (1, 1, "ok")
    assert (parsed[1].value, parsed[1].attempts, parsed[1].status) == (None, 3, "parse_failure")
    assert parsed[1].text == "still no idea"


def test_api_key_comes_from_the_environment_and_is_never_stored(tiny, tmp_path, monkeypatch):
    secret = "sk-test-not-a-real-key-4a7f"
    monkeypatch.setenv("RPBENCH_TEST_JUDGE_KEY", secret)
    with serve_in_thread(tiny, {"scripted": [{"match": "?", "reply": "1"}]}) as server:
        client = client_for(server, tmp_path, api_key_env="RPBENCH_TEST_JUDGE_KEY")
        client.judge_many(requests_for("a?"))
        client.close()
    assert secret not in repr(client.config) and secret not in repr(client.stats)
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert stored  # the reply was cached
    assert secret.encode() not in stored


def test_openai_endpoint_without_a_key_fails_fast_naming_the_variable(monkeypatch):
    monkeypatch.delenv("RPBENCH_ABSENT_KEY", raising=False)
    with pytest.raises(JudgeConfigError, match="RPBENCH_ABSENT_KEY"):
        JudgeClient(JudgeConfig.from_mapping({"model": "gpt-4o-mini", "api_key_env": "RPBENCH_ABSENT_KEY"}))


def test_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown keys.*temprature"):
        JudgeConfig.from_mapping({"model": "m", "temprature": 0.7})
