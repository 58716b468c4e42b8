"""rpbench.serve with a vision-language model: OpenAI image parts (base64 data URLs) on a real HTTP server
on 127.0.0.1, answered as in-process generation answers the same prompt and image."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.data import readers
from rpbench.data.mmrole.reader import MMRoleOptions
from rpbench.eval.generate import generate_predictions
from rpbench.models.config_tree import compose_model_config
from rpbench.serve.model import load_served_model
from rpbench.serve.running import serve_in_thread

SAMPLE = Path(__file__).resolve().parent.parent / "rpbench" / "resources" / "sample" / "mmrole"
IMAGES = sorted((SAMPLE / "images").rglob("*.jpg"))
MAX_NEW = 8


@pytest.fixture(scope="module")
def tiny_vl():
    # initializer_range 0.2: greedy replies that vary with the prompt and the image
    cfg = compose_model_config("tiny-qwen2-vl")
    return load_served_model(replace(cfg, tiny={**cfg.tiny, "initializer_range": 0.2}))


def data_url(path: Path) -> str:
    return f"data:image/jpeg;base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def image_message(text: str, url: str) -> dict:
    return {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
    }


@pytest.fixture(scope="module")
def in_process(generate_texts):
    def in_process(served, text: str, image: Path) -> str:
        conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        [reply] = generate_texts(
            served.model, served.tokenizer, [conversation], max_new_tokens=MAX_NEW, images=[[str(image)]]
        )
        return reply

    return in_process


def test_image_messages_are_answered_as_in_process_generation(tiny_vl, post, in_process):
    questions = [(f"What do you see in picture {i}?" + " Tell me." * i, image) for i, image in enumerate(IMAGES)]
    replies: dict[int, tuple[int, dict]] = {}
    with serve_in_thread(tiny_vl, {"max_batch_size": 4, "batch_wait_ms": 1000}) as server:

        def call(i: int) -> None:
            text, image = questions[i]
            body = {"messages": [image_message(text, data_url(image))], "max_tokens": MAX_NEW, "temperature": 0}
            replies[i] = post(server.base_url, body)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(questions))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        batch_sizes = list(server.stats.batch_sizes)
    assert max(batch_sizes) > 1  # images travel in batches of several requests
    expected = [in_process(tiny_vl, text, image) for text, image in questions]
    assert [replies[i][0] for i in range(len(questions))] == [200] * len(questions)
    got = [replies[i][1]["choices"][0]["message"]["content"] for i in range(len(questions))]
    assert got == expected and len(set(got)) == len(got)
    image_tokens = tiny_vl.tokenizer.image_token_count(str(IMAGES[0]))
    assert replies[0][1]["usage"]["prompt_tokens"] > image_tokens  # the image's tokens count in the prompt


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("https://example.com/cat.png", "only base64 data URLs"),
        ("file:///etc/passwd", "reads no files"),
        ("/etc/passwd", "only base64 data URLs"),
        ("data:image/png;base64,@@not base64@@", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"no image at all").decode(), "not a readable image"),
    ],
)
def test_image_urls_other_than_readable_data_urls_get_a_400(tiny_vl, url, fragment, post):
    with serve_in_thread(tiny_vl) as server:
        status, reply = post(server.base_url, {"messages": [image_message("What is this?", url)], "max_tokens": 2})
    assert status == 400
    assert fragment in reply["error"]["message"] and "messages[0].content[0]" in reply["error"]["message"]


def test_image_placeholders_in_the_text_get_a_400(tiny_vl, post):
    text = f"Look: {tiny_vl.tokenizer.image_token}"
    with serve_in_thread(tiny_vl) as server:
        status, reply = post(server.base_url, {"messages": [{"role": "user", "content": text}], "max_tokens": 2})
    assert status == 400 and "image placeholder" in reply["error"]["message"]


def test_evaluator_generation_through_the_served_model_sends_the_images(
    tiny_vl, compose, tmp_path, generation_options, evaluation_of
):
    """evaluator.backend=endpoint against the served tiny-qwen2-vl: the same predictions as in-process."""
    from rpbench.eval.evaluate import generate

    images = MMRoleOptions(image_root=str(SAMPLE / "images"), default_system=None, per_turn_samples=False)
    examples = readers.read("mmrole", "test", SAMPLE / "comment_test.json", images).examples[:4]
    options = generation_options(max_new_tokens=MAX_NEW, batch_size=4)
    local = tmp_path / "local.jsonl"
    generate_predictions(tiny_vl.model, tiny_vl.tokenizer, examples, local, options)
    with serve_in_thread(tiny_vl) as server:
        cfg = compose(
            "data=sample_mmrole",
            "evaluator=mmrole",
            "evaluator.backend=endpoint",
            f"evaluator.endpoint.base_url={server.base_url}",
            f"evaluator.endpoint.model={server.model_name}",
            f"evaluator.generation.max_new_tokens={MAX_NEW}",
        )
        report = generate(evaluation_of(cfg, tmp_path), examples, tmp_path / "endpoint.jsonl")
        requests = server.stats.requests
    assert requests == len(examples) and report["images"] == {"used": len(examples), "history_dropped": 0}
    read = [
        [json.loads(line)["prediction"] for line in path.read_text().splitlines()]
        for path in (local, tmp_path / "endpoint.jsonl")
    ]
    assert read[0] == read[1]
