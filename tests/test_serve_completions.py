"""rpbench.serve's /v1/completions: a real HTTP server on 127.0.0.1 around the tiny model, its echoed prompt
log-probabilities checked against the model's own forward pass."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import torch

from rpbench.serve.model import load_served_model
from rpbench.serve.running import serve_in_thread

PROMPT = "The sky on a clear day is blue"


@pytest.fixture(scope="module")
def served():
    tiny = load_served_model("tiny-qwen2")
    with serve_in_thread(tiny) as server:
        yield tiny, server


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def own_logprobs(tiny, ids: list[int]) -> list[float]:
    """Each token's log-probability after the ones before it, one unpadded forward pass."""
    with torch.no_grad():
        logits = tiny.model(torch.tensor([ids])).logits[0].log_softmax(-1)
    return [float(logits[i - 1, ids[i]]) for i in range(1, len(ids))]


def test_echo_scores_the_prompt_as_the_model_does(served):
    tiny, server = served
    ids = tiny.tokenizer(PROMPT, add_special_tokens=False).input_ids
    short = ids[:4]
    status, body = post(server.base_url, {"prompt": [PROMPT, short], "echo": True, "logprobs": 2, "max_tokens": 0})
    assert status == 200 and body["object"] == "text_completion"
    first, second = (c["logprobs"] for c in body["choices"])
    assert body["choices"][0]["text"] == PROMPT and first["token_logprobs"][0] is None
    # the batch is padded (two lengths): each row still matches its own unpadded forward pass
    assert first["token_logprobs"][1:] == pytest.approx(own_logprobs(tiny, ids), abs=1e-4)
    assert second["token_logprobs"][1:] == pytest.approx(own_logprobs(tiny, short), abs=1e-4)
    assert "".join(first["tokens"]) == PROMPT and first["text_offset"][-1] == len(PROMPT) - len(first["tokens"][-1])
    assert all(
        len(top) == 2 and max(top.values()) >= lp
        for top, lp in zip(first["top_logprobs"][1:], first["token_logprobs"][1:])
    )
    assert body["usage"]["prompt_tokens"] == len(ids) + 4 and body["usage"]["completion_tokens"] == 0


def test_generation_with_echo_scores_the_generated_token_too(served):
    tiny, server = served
    ids = tiny.tokenizer(PROMPT, add_special_tokens=False).input_ids
    # lm-eval's local-completions loglikelihood request: one generated token, its log-probability last
    status, body = post(
        server.base_url, {"prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
    )
    assert status == 200
    logprobs = body["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(ids) + 1
    with torch.no_grad():
        greedy = int(tiny.model(torch.tensor([ids])).logits[0, -1].argmax())
    assert logprobs["token_logprobs"][1:] == pytest.approx(own_logprobs(tiny, [*ids, greedy]), abs=1e-4)
    # without echo: the generated text and only its own log-probabilities
    status, body = post(server.base_url, {"prompt": ids, "logprobs": 0, "max_tokens": 3, "temperature": 0})
    assert status == 200 and not body["choices"][0]["text"].startswith(PROMPT)
    assert 1 <= len(body["choices"][0]["logprobs"]["token_logprobs"]) <= 3


@pytest.mark.parametrize(
    "body, named",
    [
        ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
        ({"prompt": PROMPT, "echo": True, "max_tokens": 0, "logprobs": 9}, "logprobs"),
        ({"prompt": "", "echo": True, "max_tokens": 0}, "prompt[0]"),
        ({"prompt": [1, -2], "echo": True, "max_tokens": 0}, "prompt[0]"),
        ({"prompt": {"text": PROMPT}}, "prompt"),
        ({"prompt": PROMPT, "max_tokens": 10**6}, "maximum context length"),
        ({"prompt": PROMPT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"prompt": PROMPT, "stream": True}, "stream"),
        ({"prompt": PROMPT, "stop": {"a": 1}}, "stop"),
        ({"prompt": PROMPT, "temperature": 10**400}, "temperature must be a finite number"),
        ({"prompt": PROMPT, "top_p": -(10**400)}, "top_p must be a finite number"),
    ],
)
def test_bad_completion_requests_are_400s_naming_the_field(served, body, named):
    status, reply = post(served[1].base_url, body)
    assert status == 400 and named in reply["error"]["message"]


def test_another_model_name_is_a_404(served):
    status, reply = post(served[1].base_url, {"prompt": PROMPT, "model": "gpt-4"})
    assert status == 404 and reply["error"]["code"] == "model_not_found"


def test_a_stop_string_cuts_the_text_and_its_logprobs(served):
    _, server = served
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 0}
    whole = post(server.base_url, body)[1]["choices"][0]
    assert whole["text"] == " blue" * 12 and whole["finish_reason"] == "length"  # the tiny model repeats itself
    cut = post(server.base_url, {**body, "stop": [" blue blue blue", "zzz"]})[1]["choices"][0]
    assert cut["text"] == "" and cut["finish_reason"] == "stop" and cut["logprobs"]["tokens"] == []
    cut = post(server.base_url, {**body, "stop": "e b"})[1]["choices"][0]
    assert cut["text"] == " blu" and cut["logprobs"]["tokens"] == [" blue"]
