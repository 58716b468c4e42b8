"""No file outside the image root reaches an endpoint: a recording chat-completions server on 127.0.0.1
sees the bytes of an image inside the root, and never those of a file an answer or prompt points out of it."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from rpbench.core.errors import DataFormatError
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.benchmarks.mmrole.judging import judge_answers
from rpbench.eval.generate import generate_via_endpoint
from rpbench.scoring.chat.client import ChatClient

SECRET = b"root:x:0:0:TOP-SECRET-CONTENTS-" * 8
PICTURE = b"\xff\xd8\xff\xe0 an honest picture " * 8


@pytest.fixture(scope="module")
def review_tokens(group_values) -> int:
    """The reply length of evaluator=mmrole's judge."""
    return group_values("evaluator", "mmrole", "evaluator")["judge_max_tokens"]


def received(server, data: bytes) -> bool:
    """Whether ``data`` arrived, raw or base64-encoded, in any request so far."""
    encoded = base64.b64encode(data)
    return any(data in body or encoded in body for body in server.bodies)


@pytest.fixture
def server(chat_stub):
    with chat_stub(lambda body: "[Scores]: (9, 10)") as srv:
        yield srv


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """tmp/images (the image root) holds ok.jpg and a symlink to tmp/secret.txt, which is outside it."""
    (tmp_path / "secret.txt").write_bytes(SECRET)
    images = tmp_path / "images"
    images.mkdir()
    (images / "ok.jpg").write_bytes(PICTURE)
    os.symlink(tmp_path / "secret.txt", images / "escape.jpg")
    return images


HOSTILE = ["dotdot", "dotdot-to-slash", "absolute", "symlink", "etc-passwd", "dotdot-etc-passwd"]


def hostile_name(root: Path, which: str) -> str:
    """An image name that leads out of ``root``: to tmp/secret.txt, or to /etc/passwd as in the report."""
    up_to_slash = "/".join([".."] * len(root.resolve().parts))
    return {
        "dotdot": "../secret.txt",
        "dotdot-to-slash": up_to_slash + str(root.parent.resolve() / "secret.txt"),
        "absolute": str(root.parent / "secret.txt"),
        "symlink": "escape.jpg",
        "etc-passwd": "/etc/passwd",
        "dotdot-etc-passwd": "../../../../etc/passwd",
    }[which]


def answer(rid: str, image: str) -> dict:
    return {
        "id": rid,
        "image": image,
        "role": "Ann",
        "script": "Tales",
        "other_role": "a curious human",
        "conversations": [
            {"from": "user", "value": "Look!"},
            {"from": "assistant", "value": "Lovely.", "answer": "Nice."},
        ],
    }


@pytest.fixture(scope="module")
def judge(judge_config):
    def judge(server) -> ChatClient:
        settings = {
            "model": "judge",
            "base_url": server.url,
            "api_key_env": None,
            "progress": False,
            "multimodal": True,
        }
        return ChatClient(judge_config(**settings))

    return judge


def test_judge_gets_the_image_inside_the_root(server, root, tmp_path, judge, review_tokens):
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "comment_test.json").write_text(json.dumps([answer("good", "ok.jpg")]))
    results = judge_answers(answers, judge(server), tmp_path / "reviews", review_tokens, image_root=root)
    assert results["images"] == {"attached": 1, "missing": 0}
    assert received(server, PICTURE) and not received(server, SECRET)


@pytest.mark.parametrize("which", HOSTILE)
def test_judge_never_gets_a_file_outside_the_root(server, root, tmp_path, which, judge, review_tokens):
    name = hostile_name(root, which)
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "comment_test.json").write_text(json.dumps([answer("good", "ok.jpg"), answer("bad", name)]))
    with pytest.raises(DataFormatError) as caught:
        judge_answers(answers, judge(server), tmp_path / "reviews", review_tokens, image_root=root)
    error = caught.value
    assert (error.path, error.record, error.field) == (str(answers / "comment_test.json"), "bad", "image")
    assert server.bodies == [] and not received(server, SECRET)


@pytest.mark.slow
@pytest.mark.parametrize("which", HOSTILE)
def test_endpoint_generation_never_sends_a_file_outside_the_root(
    server, root, tmp_path, which, generation_endpoint, generation_options
):
    def example(rid: str, image: str) -> EvalExample:
        return EvalExample(rid, (Turn("user", "Look!", image=image),), "Lovely.", "comment")

    out = tmp_path / "predictions.jsonl"
    endpoint, options = generation_endpoint(server.url, "m"), generation_options()
    report = generate_via_endpoint(endpoint, [example("good", "ok.jpg")], out, options, image_root=root)
    assert report.n_generated == 1 and received(server, PICTURE) and len(server.bodies) == 1

    bad = example("bad", hostile_name(root, which))
    with pytest.raises(DataFormatError) as caught:
        generate_via_endpoint(endpoint, [example("good", "ok.jpg"), bad], out, options, image_root=root)
    assert (caught.value.record, caught.value.field) == ("bad", "prompt[0].image")
    assert len(server.bodies) == 1 and not received(server, SECRET)
