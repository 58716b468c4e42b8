"""``judge=replay``: a judge backend that sends nothing and answers each request from a recording
(``judge.replay_from``: a file another judge wrote with ``judge.record_to``; ``rpbench.scoring.chat.recording``).
It runs a recipe offline as the recorded generator ran it: conf/synth/rolemrc_sample.yaml with the recording
bundled beside its inputs. A request the recording has no reply for stops the run (``ReplyNotRecorded``), naming
the file and the request: other inputs, settings or prompts than the recorded ones ask other requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from rpbench.core.errors import ConfigError, RpbenchError
from rpbench.data.files import package_path
from rpbench.scoring.chat.client import CLIENTS, ChatClient, ChatRequest, ChatResult, EndpointSettings
from rpbench.scoring.chat.endpoints import PLACEHOLDER_KEY
from rpbench.scoring.chat.recording import read_recording, replay_key

PREVIEW_CHARS = 80  # of the request's last message, in the error naming it


class ReplyNotRecorded(RpbenchError, LookupError):
    """``judge=replay`` was asked a request its recording has no reply for."""


@CLIENTS.register("replay")
class ReplayClient(ChatClient):
    """A ``ChatClient`` whose replies come from ``config.replay_from`` (cache, counters and limits as any
    client's; no key, no endpoint)."""

    def __init__(
        self,
        config: EndpointSettings,
        endpoint: str | None = None,
        api_key: str | None = None,
        label: str = "judge",
        role: str = "judge",
    ):
        source = package_path(config.replay_from)
        if not source.is_file():
            raise ConfigError(f"{label}.replay_from={config.replay_from}: no such file (record one: judge.record_to)")
        self.replies = read_recording(source)
        super().__init__(config, endpoint or f"replay:{source.name}", PLACEHOLDER_KEY, label, role)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        yield None  # nothing is sent

    async def answer(self, api: Any, request: ChatRequest, sampling: Mapping[str, Any]) -> ChatResult:
        self.stats.requests += 1
        key = replay_key(request.messages, sampling)
        found = self.replies.get(key)
        if found is None:
            last = request.messages[-1].get("content") if request.messages else ""
            preview = (last if isinstance(last, str) else str(last))[:PREVIEW_CHARS]
            raise ReplyNotRecorded(
                f"{self.label}.replay_from={self.config.replay_from}: no reply recorded for request {key[:16]} "
                f"(prompt {request.prompt_version}, {len(request.messages)} messages, sampling {dict(sampling)}, "
                f"last message {preview!r}...): the recording holds other requests (other inputs, settings or "
                f"prompts); record these on a live judge with {self.label}.record_to=<file>"
            )
        self.stats.replies += 1
        return ChatResult(
            found.text,
            prompt_tokens=found.prompt_tokens,
            completion_tokens=found.completion_tokens,
            finish_reason="stop",
        )
