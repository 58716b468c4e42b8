"""The aiohttp application around one loaded model: its routes, chat and text completions.

``ChatServer.answer_before_model`` is the one hook for a subclass: it sees each chat request once checked and
may answer it instead of the model (tests answer with injected faults and scripted replies this way).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from rpbench.serve.batching import Batcher, Pending, ServerStats
from rpbench.serve.model import ServedModel, context_length
from rpbench.serve.protocol import (
    BadRequest,
    ClientLeft,
    Sampling,
    UnknownModel,
    busy_response,
    chat_completion,
    client_gone,
    error_response,
    json_body,
    token_usage,
)
from rpbench.serve.request_checks import Accepts, ChatJob, CompletionJob, chat_request, completion_request
from rpbench.serve.settings import ServeSettings
from rpbench.serve.streaming import stream_reply


class ChatServer:
    """The aiohttp application around one loaded model; generation runs on one worker thread (``Batcher``)."""

    def __init__(self, served: ServedModel, settings: ServeSettings):
        from rpbench.models.vision import is_image_text

        self.served, self.settings = served, settings
        self.name = settings.name or served.name
        takes_images = is_image_text(served.tokenizer)
        self.accepts = Accepts(
            names=(self.name, served.identity),
            takes_images=takes_images,
            image_token=served.tokenizer.image_token if takes_images else None,
            context=context_length(served.model),
            vocab=served.model.get_input_embeddings().num_embeddings,
            max_prompts=settings.max_queue,
        )
        self.stats = ServerStats()
        self._tokenizer_lock = threading.Lock()  # the handlers and the generation thread share it
        self.batcher = Batcher(served, settings, self.stats, takes_images, self._decode)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _app: web.Application) -> None:
        await self.batcher.start()

    async def _stop(self, _app: web.Application) -> None:
        await self.batcher.stop()

    async def answer_before_model(self, index: int, conversation: list[dict[str, Any]]) -> web.Response | str | None:
        """The hook a subclass overrides to answer a chat request before the model does: ``index`` is the
        request's number among those this server received (0-based, completions included), ``conversation`` its
        checked messages. None (here, always): the model answers; a text: that is the reply (no tokens counted,
        streamed when asked); a response: sent as it is."""
        return None

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model": self.name, "requests": self.stats.requests})

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.name, "object": "model", "created": 0, "owned_by": "rpbench"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        index = self.stats.requests
        self.stats.requests += 1
        self.stats.arrivals.append(time.time())
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            try:
                job = chat_request(json_body(await request.read()), self.accepts)
            except UnknownModel as error:
                return error_response(404, str(error), "invalid_request_error", code="model_not_found")
            except (BadRequest, ValueError, TypeError) as error:
                return error_response(400, str(error), "invalid_request_error")
            answer = await self.answer_before_model(index, job.conversation)
            if isinstance(answer, web.StreamResponse):
                return answer
            if answer is not None:
                if job.stream:
                    return await stream_reply(request, self.name, None, (answer, 0, "stop"), 0, job.include_usage)
                return web.json_response(chat_completion(self.name, answer, 0, 0, "stop"))
            return await self._generated_reply(request, job)
        finally:
            self.stats.in_flight -= 1

    async def _generated_reply(self, request: web.Request, job: ChatJob) -> web.StreamResponse:
        """The model's reply to a checked chat request, queued for the next batch."""
        try:
            prompt_ids, sampling = self._fit(job)
        except BadRequest as error:
            return error_response(400, str(error), "invalid_request_error", code="context_length_exceeded")
        future = asyncio.get_running_loop().create_future()
        pieces = asyncio.Queue() if job.stream else None
        pending = Pending(prompt_ids, sampling, lambda: client_gone(request), future, pieces, job.images)
        try:
            self.batcher.submit(pending)
        except asyncio.QueueFull:
            self.stats.queue_full += 1
            return busy_response(self.settings.max_queue)
        if job.stream:
            return await stream_reply(request, self.name, pending, None, len(prompt_ids), job.include_usage)
        try:
            text, completion_tokens, finish, _ = await future
        except ClientLeft:
            return web.Response(status=499)  # nobody reads it: "client closed request"
        return web.json_response(chat_completion(self.name, text, len(prompt_ids), completion_tokens, finish))

    def _fit(self, job: ChatJob) -> tuple[list[int], Sampling]:
        """The prompt's token ids (images expanded to their tokens), and the sampling with max_tokens set
        (``max_tokens`` when the request named none, less when the prompt leaves less room); BadRequest when
        prompt and reply do not fit in the model's context."""
        from rpbench.models.generation import render_prompts

        with self._tokenizer_lock:
            shown = [job.images] if self.accepts.takes_images else None
            [prompt_ids] = render_prompts(self.served.tokenizer, [job.conversation], shown)
        context = self.accepts.context
        room = context - len(prompt_ids)
        asked = job.sampling.max_tokens or min(self.settings.max_tokens, room)
        if asked > room or room < 1:
            raise BadRequest(
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{len(prompt_ids) + asked} tokens ({len(prompt_ids)} in the messages, {asked} in the "
                f"completion). Please reduce the length of the messages or completion."
            )
        return prompt_ids, Sampling(asked, job.sampling.temperature, job.sampling.top_p)

    async def _completions(self, request: web.Request) -> web.Response:
        """``POST /v1/completions``: a text completion per prompt, with ``echo`` and ``logprobs`` as OpenAI's."""
        self.stats.requests += 1
        self.stats.arrivals.append(time.time())
        try:
            job = completion_request(json_body(await request.read()), self.accepts, self._tokenize)
        except UnknownModel as error:
            return error_response(404, str(error), "invalid_request_error", code="model_not_found")
        except (BadRequest, ValueError, TypeError) as error:
            return error_response(400, str(error), "invalid_request_error")
        if self.batcher.room < len(job.prompts):
            self.stats.queue_full += 1
            return busy_response(self.settings.max_queue)
        try:
            done = await asyncio.gather(*(self._complete(request, job, ids) for ids in job.prompts))
        except ClientLeft:
            return web.Response(status=499)
        except asyncio.QueueFull:
            self.stats.queue_full += 1
            return busy_response(self.settings.max_queue)
        choices = [{"index": i, **choice} for i, (choice, _) in enumerate(done)]
        prompt_tokens = sum(len(ids) for ids in job.prompts)
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.name,
                "choices": choices,
                "usage": token_usage(prompt_tokens, sum(n for _, n in done)),
            }
        )

    async def _complete(self, request: web.Request, job: CompletionJob, prompt: list[int]) -> tuple[dict, int]:
        """One prompt's choice (without its index) and its completion tokens: generated (unless max_tokens
        is 0), cut at the first ``stop`` string, and scored when ``logprobs`` is asked."""
        generated, text, finish = [], "", "length"
        if job.sampling.max_tokens:
            _, _, finish, generated = await self._queued(request, prompt, job.sampling)
            generated, text, finish = self._cut(generated, job.stop, finish)
        choice = {"text": (self._piece(prompt) if job.echo else "") + text, "finish_reason": finish, "logprobs": None}
        if job.logprobs is not None:
            logprobs, tops = await self._queued(request, prompt + generated, Sampling(0, 0.0, 1.0), job.logprobs)
            start = 0 if job.echo else len(prompt)
            choice["logprobs"] = self._logprobs_object((prompt + generated)[start:], logprobs[start:], tops[start:])
        return choice, len(generated)

    async def _queued(self, request: web.Request, ids: list[int], sampling: Sampling, top: int = 0) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.batcher.submit(Pending(ids, sampling, lambda: client_gone(request), future, top=top))
        return await future

    def _cut(self, ids: list[int], stops: Sequence[str], finish: str) -> tuple[list[int], str, str]:
        """The generated ids and text up to the end-of-turn token or the first ``stop`` string (excluded from
        the text); the stop token stays in the ids, as it is reported in logprobs."""
        text = self._piece([t for t in ids if t not in self.served.stop_ids])
        cuts = [text.index(s) for s in stops if s in text]
        if not cuts:
            return ids, text, finish
        text = text[: min(cuts)]
        keep = next(k for k in range(len(ids) + 1) if len(self._piece(ids[:k])) >= len(text))
        return ids[:keep], text, "stop"

    def _logprobs_object(
        self, ids: list[int], logprobs: list[float | None], tops: list[list[tuple[int, float]] | None]
    ) -> dict[str, Any]:
        """OpenAI's completion logprobs: tokens, token_logprobs, top_logprobs and text_offset."""
        with self._tokenizer_lock:
            decode = self.served.tokenizer.decode
            tokens = [decode([t]) for t in ids]
            top = [None if t is None else {decode([i]): value for i, value in t} for t in tops]
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": top, "text_offset": offsets}

    def _tokenize(self, text: str) -> list[int]:
        """A raw prompt's token ids, as the tokenizer reads the text (no special tokens added)."""
        with self._tokenizer_lock:
            return self.served.tokenizer(text, add_special_tokens=False).input_ids

    def _piece(self, ids: Sequence[int]) -> str:
        with self._tokenizer_lock:
            return self.served.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _decode(self, row: Sequence[int]) -> str:
        """A reply's text from its generated ids (any thread)."""
        from rpbench.models.generation import decode_completion

        with self._tokenizer_lock:
            return decode_completion(self.served.tokenizer, row, self.served.stop_ids)
