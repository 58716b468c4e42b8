"""rpbench.serve: a real HTTP server on 127.0.0.1 around the tiny model."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from conftest import served_from_command_line
from rpbench.serve import GARBAGE_REPLY, ServeOptions, load_served_model, serve_in_thread

HELLO = [{"role": "user", "content": "Hello there, who are you?"}]


@pytest.fixture(scope="module")
def tiny():
    return load_served_model("tiny-qwen2")


def post(url: str, body: dict, timeout: float = 60) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def test_chat_completion_models_and_health(tiny):
    with serve_in_thread(tiny) as server:
        status, body = post(server.base_url, {"model": "tiny:qwen2", "messages": HELLO, "max_tokens": 8, "temperature": 0})
        assert status == 200
        assert body["object"] == "chat.completion"
        choice = body["choices"][0]
        assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
        assert choice["finish_reason"] in ("stop", "length")
        usage = body["usage"]
        assert usage["prompt_tokens"] > 5 and 0 <= usage["completion_tokens"] <= 8
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert get(f"{server.base_url}/models")["data"][0]["id"] == server.model_name == "tiny:qwen2"
        assert get(f"{server.url}/health") == {"status": "ok", "model": "tiny:qwen2", "requests": 1}


def test_greedy_replies_are_deterministic_across_requests(tiny):
    with serve_in_thread(tiny) as server:
        body = {"messages": HELLO, "max_tokens": 12, "temperature": 0}
        first, second = post(server.base_url, body)[1], post(server.base_url, body)[1]
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]


def test_concurrent_requests_are_batched(tiny):
    options = {"max_batch_size": 4, "batch_wait_ms": 1000}
    statuses = []
    with serve_in_thread(tiny, options) as server:

        def call(i: int) -> None:
            messages = [{"role": "user", "content": f"Question number {i}?"}]
            statuses.append(post(server.base_url, {"messages": messages, "max_tokens": 4, "temperature": 0})[0])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sizes = list(server.stats.batch_sizes)
    assert statuses == [200] * 6
    assert sum(sizes) == 6 and max(sizes) == 4


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "role"),
        ({"messages": HELLO, "stream": True}, "stream"),
        ({"messages": HELLO, "n": 2}, "n=1"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                            {"type": "text", "text": "What is this?"},
                        ],
                    }
                ]
            },
            "images",
        ),
    ],
)
def test_bad_requests_get_a_400_that_says_why(tiny, body, fragment):
    with serve_in_thread(tiny) as server:
        status, reply = post(server.base_url, body)
    assert status == 400
    assert fragment in reply["error"]["message"]


def test_text_content_parts_are_accepted(tiny):
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
    with serve_in_thread(tiny, {"scripted": [{"match": "Hello there", "reply": "joined"}]}) as server:
        status, body = post(server.base_url, {"messages": [{"role": "user", "content": parts}]})
    assert status == 200 and body["choices"][0]["message"]["content"] == "joined"


def test_faults_are_served_in_request_order_then_normal(tiny):
    with serve_in_thread(tiny, {"faults": ["429", "ok", "500", "garbage"]}) as server:
        replies = [post(server.base_url, {"messages": HELLO, "max_tokens": 4}) for _ in range(5)]
        assert server.stats.faults_served == 3
    assert [status for status, _ in replies] == [429, 200, 500, 200, 200]
    assert replies[0][1]["error"]["type"] == "rate_limit_error"
    assert replies[3][1]["choices"][0]["message"]["content"] == GARBAGE_REPLY
    assert replies[4][1]["choices"][0]["message"]["content"] != GARBAGE_REPLY


def test_options_are_validated():
    with pytest.raises(ValueError, match="unknown keys"):
        ServeOptions.from_mapping({"batch": 3})
    with pytest.raises(ValueError, match="faults"):
        ServeOptions.from_mapping({"faults": ["404"]})
    with pytest.raises(ValueError, match="scripted"):
        ServeOptions.from_mapping({"scripted": [{"match": "x"}]})


@pytest.mark.slow
def test_command_line_serves_on_a_free_port():
    with served_from_command_line("model=tiny-qwen2") as (name, base_url):
        assert name == "tiny:qwen2" and base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1") and not base_url.endswith(":0/v1")
        status, body = post(base_url, {"messages": HELLO, "max_tokens": 4, "temperature": 0})
        assert status == 200 and body["model"] == "tiny:qwen2"


def test_served_name_hides_local_folders(tmp_path):
    from rpbench.serve import served_name

    first, second = tmp_path / "run-a" / "model", tmp_path / "run-b" / "model"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    names = {served_name({"name_or_path": str(p)}) for p in (first, second)}
    assert len(names) == 2 and all(n.startswith("local/model-") and str(tmp_path) not in n for n in names)
    assert served_name({"name_or_path": "Qwen/Qwen2.5-7B-Instruct"}) == "Qwen/Qwen2.5-7B-Instruct"
