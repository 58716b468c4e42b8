"""judge.record_to and judge=replay: replies recorded from a real endpoint on 127.0.0.1 are answered again with
nothing sent; a request the recording lacks stops the run naming the file and the request."""

from __future__ import annotations

import pytest

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.scoring.chat.client import ChatRequest, EndpointSettings, open_client
from rpbench.scoring.chat.replay import ReplyNotRecorded


def asks(*questions: str, max_tokens: int = 6) -> list[ChatRequest]:
    return [ChatRequest(({"role": "user", "content": q},), max_tokens, "test-v1") for q in questions]


@pytest.fixture
def replay_config(group_values):
    def replay_config(recording, **overrides) -> EndpointSettings:
        values = {**group_values("judge", "replay", "judge"), "replay_from": str(recording), "progress": False}
        return EndpointSettings.parse({**values, **overrides}, "judge")

    return replay_config


@pytest.fixture
def recorded(tmp_path, chat_stub, judge_config):
    """Two replies of a stub endpoint recorded in ``replies.jsonl`` (the second asked twice: once recorded)."""
    recording = tmp_path / "replies.jsonl"
    with chat_stub(lambda body: f"echo: {body['messages'][-1]['content']}", lambda body: (7, 3)) as stub:
        config = judge_config(base_url=stub.url, model="m", record_to=str(recording))
        with open_client(config) as client:
            live = client.ask_many(asks("Who are you?", "Where do you live?", "Where do you live?"))
        assert len(stub.requests) == 3
    return recording, [r.text for r in live]


def test_replay_answers_the_recorded_requests_and_sends_nothing(recorded, replay_config):
    recording, live = recorded
    assert len(recording.read_text().splitlines()) == 2  # one line per distinct request
    with open_client(replay_config(recording)) as client:
        replayed = client.ask_many(asks("Where do you live?", "Who are you?"))
        stats = client.stats
    assert [r.text for r in replayed] == [live[1], live[0]] == ["echo: Where do you live?", "echo: Who are you?"]
    assert (replayed[0].prompt_tokens, replayed[0].completion_tokens) == (7, 3)
    assert stats.requests == stats.replies == 2 and stats.failures == 0 and stats.cost_usd == 0


def test_a_request_not_recorded_is_named_with_the_file(recorded, replay_config):
    recording, _ = recorded
    with open_client(replay_config(recording)) as client:
        with pytest.raises(ReplyNotRecorded, match=r"replies\.jsonl: no reply recorded .*'What is your name\?'"):
            client.ask_many(asks("Who are you?", "What is your name?"))
        # the same messages with another reply length, or another temperature, are other requests
        with pytest.raises(ReplyNotRecorded, match=r"'max_tokens': 9.*'Who are you\?'"):
            client.ask_many(asks("Who are you?", max_tokens=9))
    with open_client(replay_config(recording, temperature=0.7)) as client:
        with pytest.raises(ReplyNotRecorded, match=r"'temperature': 0\.7"):
            client.ask_many(asks("Who are you?"))


def test_a_cached_reply_is_recorded_too(tmp_path, chat_stub, judge_config, replay_config):
    recording, cache = tmp_path / "replies.jsonl", str(tmp_path / "cache.sqlite")
    with chat_stub(lambda body: "ok") as stub:
        with open_client(judge_config(base_url=stub.url, model="m", cache_path=cache)) as client:
            client.ask_many(asks("Hello?"))
        with open_client(judge_config(base_url=stub.url, model="m", cache_path=cache, record_to=str(recording))) as c:
            assert c.ask_many(asks("Hello?"))[0].cached
        assert len(stub.requests) == 1
    with open_client(replay_config(recording)) as client:
        assert client.ask_many(asks("Hello?"))[0].text == "ok"


def test_a_malformed_recording_is_named_by_line_and_field(tmp_path, replay_config):
    recording = tmp_path / "replies.jsonl"
    recording.write_text('{"key": "k", "model": "m", "reply": 3, "prompt_tokens": 0, "completion_tokens": 0}\n')
    with pytest.raises(DataFormatError, match=r"replies\.jsonl: record line 1: field 'reply': a str"):
        with open_client(replay_config(recording)):
            pass
    with pytest.raises(ConfigError, match=r"judge\.replay_from=.*missing\.jsonl: no such file"):
        with open_client(replay_config(tmp_path / "missing.jsonl")):
            pass


@pytest.mark.slow
def test_judge_replay_needs_no_key_and_its_settings_are_checked(compose):
    from rpbench.validate import validate

    spec = validate(compose("objective=none", "judge=replay"))  # a judged evaluation (evaluator=rolemrc)
    assert spec.judge.backend == "replay" and spec.judge.replay_from.startswith("pkg://rpbench/resources/")
    with pytest.raises(ConfigError) as refused:
        validate(compose("objective=none", "judge=replay", "judge.record_to=again.jsonl"))
    assert "judge.record_to='again.jsonl': expected null with judge=replay" in str(refused.value)
    with pytest.raises(ConfigError, match=r"judge\.replay_from='r\.jsonl': expected the recorded replies"):
        validate(compose("objective=none", "judge=vllm", "+judge.replay_from=r.jsonl"))
