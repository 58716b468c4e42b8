"""A test double of rpbench's server: the real ``ChatServer`` around a loaded model, answering some chat requests
itself through its hook (``answer_before_model``) before the model does.

``faults[i]`` makes the i-th request (0-based) fail on purpose: ``404`` (a model the endpoint does not serve),
``429``, ``500``, ``503`` (an OpenAI error, the
429 and 503 with ``retry_after`` as their Retry-After header when given), ``garbage`` (a reply no judge parser
accepts), ``truncated_json``, ``wrong_shape``, ``html`` (an HTTP 200 that is no chat completion), ``slow``
(answered after ``slow_s`` seconds), ``ok`` (no fault). ``replies`` maps a text to the reply of any request
whose last user message contains it (the first that matches; the model answers the others).

    with serve_in_thread(tiny, make_server=scripted(faults=["429"], replies={"?": "1"})) as server: ...
    run(validate(cfg), local_judge_server=scripted_judge(replies={"": "1"}))      # judge=local, scripted
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from aiohttp import web

from rpbench.serve.model import ServedModel
from rpbench.serve.protocol import chat_completion, error_response, message_text
from rpbench.serve.running import MakeServer, local_judge
from rpbench.serve.server import ChatServer
from rpbench.serve.settings import ServeSettings

FAULTS = ("ok", "404", "429", "500", "503", "garbage", "slow", "truncated_json", "wrong_shape", "html")
GARBAGE_REPLY = "~~ \u2042 unreadable judge output \u2042 ~~"


@dataclass(frozen=True)
class Script:
    faults: tuple[str, ...]
    replies: Mapping[str, str]
    slow_s: float
    retry_after: str | None


class ScriptedServer(ChatServer):
    """``ChatServer`` answering by its ``Script`` first; ``faults_served`` counts the faults it sent."""

    def __init__(self, served: ServedModel, settings: ServeSettings, script: Script):
        super().__init__(served, settings)
        self.script = script
        self.faults_served = 0

    async def answer_before_model(self, index: int, conversation: list[dict[str, Any]]) -> web.Response | str | None:
        fault = self.script.faults[index] if index < len(self.script.faults) else "ok"
        if fault != "ok":
            self.faults_served += 1
        if fault == "404":
            return error_response(404, f"injected fault for request {index}: no such model", "not_found_error")
        if fault in ("429", "500", "503"):
            kind = "rate_limit_error" if fault == "429" else "server_error"
            wait = self.script.retry_after if fault != "500" else None
            headers = {"Retry-After": wait} if wait else {}
            return error_response(int(fault), f"injected fault for request {index}", kind, headers)
        if fault == "slow":
            await asyncio.sleep(self.script.slow_s)
        if fault in ("truncated_json", "wrong_shape", "html"):
            return bad_reply(fault, chat_completion(self.name, "1", 0, 0, "stop"))
        if fault == "garbage":
            return GARBAGE_REPLY
        last_user = next((message_text(m) for m in reversed(conversation) if m["role"] == "user"), "")
        return next((reply for match, reply in self.script.replies.items() if match in last_user), None)


def bad_reply(fault: str, completion: dict[str, Any]) -> web.Response:
    """An HTTP 200 that is no chat completion: ``completion`` cut in half, with ``choices`` of the wrong shape,
    or an HTML page."""
    if fault == "truncated_json":
        body = json.dumps(completion)
        return web.Response(text=body[: len(body) // 2], content_type="application/json")
    if fault == "wrong_shape":
        return web.json_response({**completion, "choices": {"text": "1"}})
    return web.Response(text="<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")


def scripted(
    *,
    faults: Sequence[str] = (),
    replies: Mapping[str, str] | None = None,
    slow_s: float = 5.0,
    retry_after: str | None = None,
) -> MakeServer:
    """What ``serve_in_thread`` (``make_server``) builds a ``ScriptedServer`` of this script with."""
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"faults: each one of {FAULTS}, got {unknown}")
    return partial(ScriptedServer, script=Script(tuple(faults), dict(replies or {}), slow_s, retry_after))


def scripted_judge(**script: Any):
    """A ``judge=local`` server (``rpbench.serve.running.local_judge``) that is a ``ScriptedServer`` of
    ``script`` (``scripted``'s keywords): what the pipeline, ``client_opener`` or ``open_client`` take."""
    return partial(local_judge, make_server=scripted(**script))
