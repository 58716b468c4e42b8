"""An OpenAI-compatible chat-completions server (HTTP on 127.0.0.1) for any rpbench model config.

    python -m rpbench.serve model=tiny-qwen2 port=0          # port 0: a free port; the URL is printed
    python -m rpbench.serve model=qwen2.5-7b-instruct model.dtype=bfloat16 max_batch_size=16

Endpoints: ``POST /v1/chat/completions`` (``stream=true``: OpenAI's server-sent chunks as tokens are
generated, usage in a last chunk with ``stream_options.include_usage``), ``POST /v1/completions`` (OpenAI's
text completions of a raw prompt, no chat template: ``prompt`` a string, token ids or a list of either (a
string is tokenized as the tokenizer does: text spelling a control token, e.g. ``<|im_end|>``, becomes that
control token; send token ids to avoid it);
``echo`` and ``logprobs`` give the prompt's own token log-probabilities, with ``max_tokens=0`` nothing is
generated: what lm-eval's ``local-completions`` scores loglikelihood tasks with; ``stop`` strings cut the
text), ``GET /v1/models``, ``GET /health``.
The model is served as ``name=`` (default: the model folder's name, or the hub id's last part); requests
may also name its full identity (the hub id, or ``local/<folder>-<hash of its path>``, which judge caches
key on). Requests are checked as
OpenAI checks them (400 for bad values, prompt + max_tokens beyond the model's context included; 404 for
another model name) and queue first in, first out: at most ``max_queue`` wait (then 503 with Retry-After).
A vision-language model (e.g. ``model=tiny-qwen2-vl``) also takes OpenAI image parts,
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``: only base64 data URLs, since
the server reads no files and fetches no URLs for its clients (400 otherwise, and for any image sent to a
text-only model).
The first waiting request opens a window of ``batch_wait_ms`` during which up to ``max_batch_size``
requests are collected, and each group with the same sampling settings becomes one ``generate`` call.
A request whose client has disconnected is dropped from the queue, or its row stops generating at the
next token. ``serve_in_thread`` runs the server inside the current process (tests, ``judge=local``).

For tests, ``faults`` makes the i-th request fail on purpose (``429``, ``500``, ``503``; ``garbage`` = a
reply no judge parser accepts; ``truncated_json``, ``wrong_shape``, ``html`` = an HTTP 200 that is no chat
completion; ``slow`` = answer after ``slow_s`` seconds; ``ok`` = no fault), ``retry_after`` is sent as the
Retry-After header of the 429/503 faults, and ``scripted`` answers requests whose last user message
contains ``match`` with a fixed ``reply`` instead of the model.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import math
import re
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from omegaconf import OmegaConf

from rpbench.models.config_tree import compose_model_config
from rpbench.models.settings import ModelSettings

if TYPE_CHECKING:
    from rpbench.scoring.chat.client import EndpointSettings

FAULTS = ("ok", "429", "500", "503", "garbage", "slow", "truncated_json", "wrong_shape", "html")
GARBAGE_REPLY = "~~ \u2042 unreadable judge output \u2042 ~~"
# Seconds a client is asked to wait (Retry-After) when the queue is full.
BUSY_RETRY_AFTER_S = 1
# /v1/completions as OpenAI's: the most alternatives ``logprobs`` may ask per token; max_tokens when none is named.
MAX_LOGPROBS = 5
DEFAULT_COMPLETION_TOKENS = 16


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 0
    max_batch_size: int = 8
    batch_wait_ms: float = 5.0
    # Reply length when a request names none (less when the prompt leaves less room in the context).
    max_tokens: int = 256
    # Requests waiting for generation beyond this many are answered 503 with Retry-After.
    max_queue: int = 64
    faults: tuple[str, ...] = ()
    slow_s: float = 5.0
    retry_after: str | None = None
    scripted: tuple[Mapping[str, str], ...] = ()
    # The model name clients send and /v1/models lists (None: see served_name).
    name: str | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ServeOptions:
        values = dict(values)
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"serve options: unknown keys {unknown}; known: {[f.name for f in fields(cls)]}")
        faults = tuple(str(f) for f in values.pop("faults", ()) or ())
        bad = [f for f in faults if f not in FAULTS]
        if bad:
            raise ValueError(f"serve option faults: each entry must be one of {FAULTS}, got {bad}")
        if values.get("retry_after") is not None:  # a command line gives 1 as a number
            values["retry_after"] = str(values["retry_after"])
        scripted = tuple(values.pop("scripted", ()) or ())
        if not all(isinstance(s, Mapping) and {"match", "reply"} <= set(s) for s in scripted):
            raise ValueError("serve option scripted: a list of {match: str, reply: str}")
        options = cls(faults=faults, scripted=scripted, **values)
        if options.max_batch_size < 1 or options.batch_wait_ms < 0 or options.max_queue < 1:
            raise ValueError("serve options: max_batch_size and max_queue must be >= 1, batch_wait_ms >= 0")
        if options.max_tokens < 1:
            raise ValueError(f"serve options: max_tokens must be >= 1, got {options.max_tokens}")
        return options


@dataclass
class ServedModel:
    model: Any
    tokenizer: Any
    stop_ids: list[int]
    name: str
    # Unique across local folders of the same name; no machine path (see model_identity).
    identity: str


STATS_HISTORY = 10_000


@dataclass
class ServerStats:
    """What the server saw: chat requests (faulted ones included) and their arrival times (``time.time``),
    concurrency, batch sizes, requests refused for a full queue, requests whose client left before the
    reply (``disconnected``) and, for those cut off mid-generation, the tokens generated by then.
    The per-request lists keep the last ``STATS_HISTORY`` entries, so a long-lived server does not grow."""

    requests: int = 0
    arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_HISTORY))
    in_flight: int = 0
    max_in_flight: int = 0
    faults_served: int = 0
    batch_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=STATS_HISTORY))
    queue_full: int = 0
    disconnected: int = 0
    stopped_after_tokens: deque[int] = field(default_factory=lambda: deque(maxlen=STATS_HISTORY))


@dataclass(frozen=True)
class CompletionJob:
    """A checked /v1/completions request: its prompts as token ids, sampling (max_tokens 0: score only),
    whether to echo the prompt, the top alternatives to report per token (None: no logprobs), stop strings."""

    prompts: list[list[int]]
    sampling: Sampling
    echo: bool
    logprobs: int | None
    stop: tuple[str, ...]


class BadRequest(Exception):
    pass


class UnknownModel(Exception):
    pass


class ClientLeft(Exception):
    """The client disconnected before its reply; ``tokens`` were generated by then (None: none started)."""

    def __init__(self, tokens: int | None = None):
        super().__init__("the client disconnected")
        self.tokens = tokens


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float
    top_p: float


@dataclass
class Pending:
    """A request waiting for generation: its prompt ids, images (decoded, in prompt order) and sampling,
    a check whether its client left, its reply."""

    prompt_ids: list[int]
    sampling: Sampling
    gone: Callable[[], bool]
    future: asyncio.Future
    # stream=true: the reply's text pieces as they are generated (put from the generation thread).
    pieces: asyncio.Queue | None = None
    images: list[Any] = field(default_factory=list)
    # max_tokens 0 (a /v1/completions scoring request): the top alternatives per position to report.
    top: int = 0


def load_served_model(model_cfg: ModelSettings | Mapping[str, Any] | str) -> ServedModel:
    """Load a model for serving: its settings, a model config mapping, or the name of a ``conf/model`` entry."""
    from rpbench.models import end_of_turn_ids, load

    if isinstance(model_cfg, str):
        cfg = compose_model_config(model_cfg)
    elif isinstance(model_cfg, ModelSettings):
        cfg = model_cfg
    else:
        cfg = ModelSettings.parse(model_cfg, "model")
    model, tokenizer = load(cfg)
    model.eval()
    return ServedModel(
        model,
        tokenizer,
        end_of_turn_ids(cfg, tokenizer),
        served_name(cfg.name_or_path),
        model_identity(cfg.name_or_path),
    )


def served_name(name: str) -> str:
    """The default model name clients use for ``model.name_or_path`` ``name``: a local folder's name, the hub
    id's last part, ``tiny:<family>``."""
    path = Path(name)
    return path.resolve().name if path.exists() else name.rstrip("/").rsplit("/", 1)[-1]


def model_identity(name: str) -> str:
    """The unique id of ``model.name_or_path`` ``name`` (judge caches key on it): the hub id or
    ``tiny:<family>``; for a local folder its name plus a hash of its full path, so no machine path reaches
    results."""
    path = Path(name)
    if not path.exists():
        return name
    return f"local/{path.resolve().name}-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]}"


class ChatServer:
    """The aiohttp application around one loaded model; generation runs on one worker thread."""

    def __init__(self, served: ServedModel, options: ServeOptions):
        from rpbench.models.vision import is_image_text

        self.served, self.options = served, options
        self.name = options.name or served.name
        self.takes_images = is_image_text(served.tokenizer)
        self.context = context_length(served.model)
        self.stats = ServerStats()
        self._tokenizer_lock = threading.Lock()  # the handlers and the generation thread share it
        self._queue: asyncio.Queue | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rpbench-generate")
        self._batcher: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's, for RowStreamer

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.on_startup.append(self._start_batcher)
        app.on_cleanup.append(self._stop_batcher)
        return app

    async def _start_batcher(self, _app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(maxsize=self.options.max_queue)
        self._batcher = asyncio.create_task(self._batch_loop())

    async def _stop_batcher(self, _app: web.Application) -> None:
        if self._batcher is not None:
            self._batcher.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model": self.name, "requests": self.stats.requests})

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.name, "object": "model", "created": 0, "owned_by": "rpbench"}]}
        )

    async def _chat(self, request: web.Request) -> web.Response:
        index = self.stats.requests
        self.stats.requests += 1
        self.stats.arrivals.append(time.time())
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            fault = self.options.faults[index] if index < len(self.options.faults) else "ok"
            if fault != "ok":
                self.stats.faults_served += 1
            if fault in ("429", "500", "503"):
                kind = "rate_limit_error" if fault == "429" else "server_error"
                wait = self.options.retry_after if fault != "500" else None
                headers = {"Retry-After": wait} if wait else {}
                return _error(int(fault), f"injected fault for request {index}", kind, headers)
            try:
                body = _json_body(await request.read())
                conversation, images, sampling = self._parse(body)
            except UnknownModel as error:
                return _error(404, str(error), "invalid_request_error", code="model_not_found")
            except (BadRequest, ValueError, TypeError) as error:
                return _error(400, str(error), "invalid_request_error")
            if fault == "slow":
                await asyncio.sleep(self.options.slow_s)
            if fault in ("truncated_json", "wrong_shape", "html"):
                return _bad_reply(fault, self._completion("1", 0, 0, "stop"))
            text = GARBAGE_REPLY if fault == "garbage" else self._scripted(conversation)
            stream, usage = bool(body.get("stream")), bool((body.get("stream_options") or {}).get("include_usage"))
            if text is not None:
                if stream:
                    return await self._stream(request, None, (text, 0, "stop"), 0, usage)
                return web.json_response(self._completion(text, 0, 0, "stop"))
            try:
                prompt_ids, sampling = self._fit(conversation, images, sampling)
            except BadRequest as error:
                return _error(400, str(error), "invalid_request_error", code="context_length_exceeded")
            future = asyncio.get_running_loop().create_future()
            pieces = asyncio.Queue() if stream else None
            pending = Pending(prompt_ids, sampling, lambda: _client_gone(request), future, pieces, images)
            try:
                self._queue.put_nowait(pending)
            except asyncio.QueueFull:
                self.stats.queue_full += 1
                message = f"the server is busy ({self.options.max_queue} requests are waiting): retry later"
                return _error(503, message, "server_error", {"Retry-After": str(BUSY_RETRY_AFTER_S)})
            if stream:
                return await self._stream(request, pending, None, len(prompt_ids), usage)
            try:
                text, completion_tokens, finish, _ = await future
            except ClientLeft:
                return web.Response(status=499)  # nobody reads it: "client closed request"
            return web.json_response(self._completion(text, len(prompt_ids), completion_tokens, finish))
        finally:
            self.stats.in_flight -= 1

    async def _completions(self, request: web.Request) -> web.Response:
        """``POST /v1/completions``: a text completion per prompt, with ``echo`` and ``logprobs`` as OpenAI's."""
        self.stats.requests += 1
        self.stats.arrivals.append(time.time())
        try:
            job = self._parse_completion(_json_body(await request.read()))
        except UnknownModel as error:
            return _error(404, str(error), "invalid_request_error", code="model_not_found")
        except (BadRequest, ValueError, TypeError) as error:
            return _error(400, str(error), "invalid_request_error")
        if self._queue.maxsize - self._queue.qsize() < len(job.prompts):
            self.stats.queue_full += 1
            message = f"the server is busy ({self.options.max_queue} requests are waiting): retry later"
            return _error(503, message, "server_error", {"Retry-After": str(BUSY_RETRY_AFTER_S)})
        try:
            done = await asyncio.gather(*(self._complete(request, job, ids) for ids in job.prompts))
        except ClientLeft:
            return web.Response(status=499)
        except asyncio.QueueFull:
            self.stats.queue_full += 1
            message = f"the server is busy ({self.options.max_queue} requests are waiting): retry later"
            return _error(503, message, "server_error", {"Retry-After": str(BUSY_RETRY_AFTER_S)})
        choices = [{"index": i, **choice} for i, (choice, _) in enumerate(done)]
        prompt_tokens = sum(len(ids) for ids in job.prompts)
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.name,
                "choices": choices,
                "usage": _usage(prompt_tokens, sum(n for _, n in done)),
            }
        )

    def _parse_completion(self, body: Any) -> CompletionJob:
        """A /v1/completions body checked as OpenAI checks it, its prompts as token ids (a text prompt is
        tokenized as given: no special tokens added)."""
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model not in (self.name, self.served.identity):
            raise UnknownModel(f"The model {model!r} does not exist: this server serves {self.name!r}")
        if body.get("stream"):
            raise BadRequest("stream=true is not supported on /v1/completions")
        if body.get("n", 1) != 1 or body.get("best_of", 1) != 1:
            raise BadRequest("only n=1 and best_of=1 are supported")
        echo = body.get("echo", False)
        if not isinstance(echo, bool):
            raise BadRequest(f"echo must be true or false, got {echo!r}")
        logprobs = body.get("logprobs")
        if logprobs is not None and (not _is_int(logprobs) or not 0 <= logprobs <= MAX_LOGPROBS):
            raise BadRequest(f"logprobs must be an integer from 0 to {MAX_LOGPROBS}, got {logprobs!r}")
        max_tokens = body.get("max_tokens", DEFAULT_COMPLETION_TOKENS)
        if not _is_int(max_tokens) or max_tokens < 0 or (max_tokens == 0 and not echo):
            raise BadRequest(f"max_tokens must be an integer >= 1 (0 only with echo=true), got {max_tokens!r}")
        stop = body.get("stop")
        if stop is not None and not isinstance(stop, str | list):
            raise BadRequest(f"stop: a non-empty string or a list of up to 4, got {stop!r}")
        stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
            raise BadRequest(f"stop: a non-empty string or a list of up to 4, got {stop!r}")
        temperature, top_p = _number(body, "temperature", 1.0), _number(body, "top_p", 1.0)
        if not 0 <= temperature <= 2:
            raise BadRequest(f"temperature must be between 0 and 2, got {temperature!r}")
        if not 0 < top_p <= 1:
            raise BadRequest(f"top_p must be in (0, 1], got {top_p!r}")
        if body.get("seed") is not None and not _is_int(body["seed"]):
            raise BadRequest(f"seed must be an integer, got {body['seed']!r}")
        prompts = self._prompt_ids(body.get("prompt"))
        if len(prompts) > self.options.max_queue:
            raise BadRequest(f"prompt: at most {self.options.max_queue} prompts per request, got {len(prompts)}")
        for i, ids in enumerate(prompts):
            if not ids or len(ids) + max_tokens > self.context:
                raise BadRequest(
                    f"prompt[{i}]: {len(ids)} tokens plus max_tokens={max_tokens} must be between 1 and this "
                    f"model's maximum context length, {self.context} tokens"
                )
        return CompletionJob(prompts, Sampling(max_tokens, temperature, top_p), echo, logprobs, stops)

    def _prompt_ids(self, prompt: Any) -> list[list[int]]:
        """``prompt`` as a list of token-id prompts: a string, a list of strings, token ids or lists of them."""
        vocab = self.served.model.get_input_embeddings().num_embeddings
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt)):
            prompt = [prompt]
        if not isinstance(prompt, list) or not prompt:
            raise BadRequest("prompt: a string, a list of strings, a list of token ids, or a list of such lists")
        out = []
        for i, one in enumerate(prompt):
            if isinstance(one, str):
                with self._tokenizer_lock:
                    out.append(self.served.tokenizer(one, add_special_tokens=False).input_ids)
            elif isinstance(one, list) and all(_is_int(t) and 0 <= t < vocab for t in one):
                out.append(list(one))
            else:
                raise BadRequest(f"prompt[{i}]: a string or a list of token ids in [0, {vocab})")
        return out

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
        self._queue.put_nowait(Pending(ids, sampling, lambda: _client_gone(request), future, top=top))
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

    def _piece(self, ids: Sequence[int]) -> str:
        with self._tokenizer_lock:
            return self.served.tokenizer.decode(list(ids), skip_special_tokens=True)

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

    def _score(self, group: list[Pending]) -> list[tuple[list[float | None], list[list[tuple[int, float]] | None]]]:
        """Per request, each token's log-probability given the ones before it (None for the first) and the
        ``top`` most likely tokens at that position."""
        return token_logprobs(self.served.model, [p.prompt_ids for p in group], max(p.top for p in group))

    def _parse(self, body: Any) -> tuple[list[dict[str, Any]], list[Any], Sampling]:
        """The conversation, its images (in order) and sampling settings of a request body, checked as
        OpenAI checks them; ``max_tokens`` 0 when the request names none (set by ``_fit``)."""
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model not in (self.name, self.served.identity):
            raise UnknownModel(f"The model {model!r} does not exist: this server serves {self.name!r}")
        if not isinstance(body.get("stream", False), bool):
            raise BadRequest(f"stream must be true or false, got {body['stream']!r}")
        if body.get("stream_options") is not None and not (
            body.get("stream") and isinstance(body["stream_options"], dict)
        ):
            raise BadRequest("stream_options: an object, only with stream=true")
        if body.get("n", 1) != 1:
            raise BadRequest("only n=1 is supported")
        if body.get("stop") is not None:
            raise BadRequest("'stop' is not supported: generation stops at the model's end-of-turn token")
        if body.get("chat_template") is not None or body.get("add_generation_prompt", True) is not True:
            raise BadRequest(
                "'chat_template' and 'add_generation_prompt' are not supported: a prompt is the served model's "
                "own template, ending on its assistant header"
            )
        if _number(body, "repetition_penalty", 1.0) != 1.0:
            raise BadRequest("'repetition_penalty' is not supported (only 1, no penalty)")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        parsed = [self._message(i, m) for i, m in enumerate(messages)]
        conversation = [message for message, _ in parsed]
        images = [image for _, shown in parsed for image in shown]
        placeholder = self.served.tokenizer.image_token if self.takes_images else None
        if placeholder and any(placeholder in _text(m) for m in conversation):
            raise BadRequest(
                f"messages: text holds the image placeholder {placeholder!r}; send images as image_url parts"
            )
        key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = body.get(key)
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
            raise BadRequest(f"{key} must be an integer >= 1, got {max_tokens!r}")
        temperature = _number(body, "temperature", 1.0)
        top_p = _number(body, "top_p", 1.0)
        if not 0 <= temperature <= 2:
            raise BadRequest(f"temperature must be between 0 and 2, got {temperature!r}")
        if not 0 < top_p <= 1:
            raise BadRequest(f"top_p must be in (0, 1], got {top_p!r}")
        return conversation, images, Sampling(max_tokens or 0, temperature, top_p)

    def _fit(
        self, conversation: list[dict[str, Any]], images: list[Any], sampling: Sampling
    ) -> tuple[list[int], Sampling]:
        """The prompt's token ids (images expanded to their tokens), and the sampling with max_tokens set;
        BadRequest when prompt and reply do not fit in the model's context."""
        from rpbench.models.generation import render_prompts

        with self._tokenizer_lock:
            shown = [images] if self.takes_images else None
            [prompt_ids] = render_prompts(self.served.tokenizer, [conversation], shown)
        room = self.context - len(prompt_ids)
        asked = sampling.max_tokens or min(self.options.max_tokens, room)
        if asked > room or room < 1:
            raise BadRequest(
                f"This model's maximum context length is {self.context} tokens. However, you requested "
                f"{len(prompt_ids) + asked} tokens ({len(prompt_ids)} in the messages, {asked} in the "
                f"completion). Please reduce the length of the messages or completion."
            )
        return prompt_ids, Sampling(asked, sampling.temperature, sampling.top_p)

    def _message(self, index: int, message: Any) -> tuple[dict[str, Any], list[Any]]:
        """A chat-template message and its decoded images: text content as one string; with images, the
        parts in order (``{"type": "image"}`` where an image stands)."""
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(f"messages[{index}]: an object with role system|user|assistant")
        content = message.get("content")
        images: list[Any] = []
        if isinstance(content, list):
            if any(isinstance(p, dict) and p.get("type") == "image_url" for p in content) and not self.takes_images:
                raise BadRequest(f"messages[{index}]: images are not supported ({self.name} is served text-only)")
            parts: list[dict[str, str]] = []
            for number, part in enumerate(content):
                where = f"messages[{index}].content[{number}]"
                if isinstance(part, dict) and part.get("type") == "image_url":
                    images.append(_data_url_image(part.get("image_url"), where))
                    parts.append({"type": "image"})
                elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                    parts.append({"type": "text", "text": part["text"]})
                else:
                    kinds = "{type: text, text: str}" + (" or {type: image_url, ...}" if self.takes_images else "")
                    raise BadRequest(f"{where}: parts must be {kinds}")
            if not images:
                return {"role": message["role"], "content": "".join(p["text"] for p in parts)}, []
            return {"role": message["role"], "content": parts}, images
        if not isinstance(content, str):
            raise BadRequest(f"messages[{index}].content: a string or a list of content parts")
        return {"role": message["role"], "content": content}, images

    def _scripted(self, conversation: list[dict[str, Any]]) -> str | None:
        last_user = next((_text(m) for m in reversed(conversation) if m["role"] == "user"), "")
        return next((s["reply"] for s in self.options.scripted if s["match"] in last_user), None)

    async def _batch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.options.batch_wait_ms / 1000
            while len(batch) < self.options.max_batch_size:
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), max(0.0, deadline - loop.time())))
                except TimeoutError:
                    break
            self.stats.batch_sizes.append(len(batch))
            groups: dict[Sampling, list[Pending]] = {}
            for pending in batch:
                groups.setdefault(pending.sampling, []).append(pending)
            for sampling, group in groups.items():
                left = [p for p in group if p.gone()]
                for pending in left:
                    pending.future.set_exception(ClientLeft())
                self.stats.disconnected += len(left)
                group = [p for p in group if p not in left]
                if not group:
                    continue
                work = (self._score, group) if sampling.max_tokens == 0 else (self._run, group, sampling)
                try:
                    outputs = await loop.run_in_executor(self._executor, *work)
                except Exception as error:  # noqa: BLE001 - each waiting request gets it (a 500)
                    outputs = [error] * len(group)
                for pending, output in zip(group, outputs):
                    if isinstance(output, ClientLeft):
                        self.stats.disconnected += 1
                        self.stats.stopped_after_tokens.append(output.tokens)
                    if pending.future.done():
                        continue
                    if isinstance(output, Exception):
                        pending.future.set_exception(output)
                    else:
                        pending.future.set_result(output)

    def _run(self, group: list[Pending], sampling: Sampling) -> list[tuple[str, int, str, list[int]] | Exception]:
        """Generate for one group: per request the text, the generated tokens before the stop token, the
        finish reason and the generated ids (the stop token included); a request whose client left stops at
        the next token (ClientLeft)."""
        import torch
        from transformers import StoppingCriteriaList

        from rpbench.models.generation import GenerationSettings, batch_inputs, hf_generation_config

        model, tok, stop_ids = self.served.model, self.served.tokenizer, self.served.stop_ids
        # The request's sampling; the rest is the server's own: no top-k (the API has none), each sampled
        # batch seeded with 0, a dynamic KV cache, one process (nothing gathered, synced or merged)
        opts = GenerationSettings(
            max_new_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=0,
            repetition_penalty=1.0,
            chat_template=None,
            generation_prompt=True,
            stop=(),
            reply_tag=None,
            seed=0,
            cache="dynamic",
            batch_size=len(group),
            max_prompt_length=None,
            synced_gpus=None,
            gather_per_batch=True,
            merge_timeout_s=1.0,
            progress=False,
        )
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else stop_ids[0]
        images = [p.images for p in group] if self.takes_images else None
        inputs = batch_inputs(tok, [p.prompt_ids for p in group], pad_id, images)
        width = inputs["input_ids"].shape[1]
        watch = ClientGone([p.gone for p in group], width)
        streamer = RowStreamer([p.pieces for p in group], width, self._loop, self._decode)
        device = next(model.parameters()).device
        if opts.sampling:
            torch.manual_seed(opts.seed)
        with torch.no_grad():
            out = model.generate(
                **{name: value.to(device) for name, value in inputs.items()},
                generation_config=hf_generation_config(opts, stop_ids, pad_id),
                stopping_criteria=StoppingCriteriaList([watch, streamer]),
            )
        results: list[tuple[str, int, str] | Exception] = []
        for row, stopped in zip(out[:, width:].tolist(), watch.stopped_after):
            if stopped is not None:
                results.append(ClientLeft(stopped))
                continue
            generated = next((i for i, t in enumerate(row) if t in stop_ids), len(row))
            text = self._decode(row)
            finish = "stop" if generated < len(row) else "length"
            results.append((text, generated, finish, row[: generated + 1]))
        return results

    def _decode(self, row: Sequence[int]) -> str:
        """A reply's text from its generated ids (any thread)."""
        from rpbench.models.generation import decode_completion

        with self._tokenizer_lock:
            return decode_completion(self.served.tokenizer, row, self.served.stop_ids)

    async def _stream(
        self,
        request: web.Request,
        pending: Pending | None,
        known: tuple[str, int, str] | None,
        prompt_tokens: int,
        include_usage: bool,
    ) -> web.StreamResponse:
        """OpenAI's chat.completion.chunk events: the role, the text as ``pending`` generates it (or the
        ``known`` reply at once), the finish reason, usage when asked, then ``data: [DONE]``."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        async def send(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> None:
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
            }
            if include_usage:
                chunk["usage"] = usage
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        sent = ""
        if pending is not None:
            while not (pending.future.done() and pending.pieces.empty()):
                piece = asyncio.ensure_future(pending.pieces.get())
                await asyncio.wait({piece, pending.future}, return_when=asyncio.FIRST_COMPLETED)
                if not piece.done():
                    piece.cancel()
                    continue
                sent += piece.result()
                await send({"content": piece.result()})
            try:
                known = pending.future.result()
            except ClientLeft:
                return response
        text, completion_tokens, finish = known[:3]
        if text.startswith(sent) and len(text) > len(sent):
            await send({"content": text[len(sent) :]})
        await send({}, finish)
        if include_usage:
            await send({}, usage=_usage(prompt_tokens, completion_tokens))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _completion(self, text: str, prompt_tokens: int, completion_tokens: int, finish: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
            "usage": _usage(prompt_tokens, completion_tokens),
        }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _error(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None, code: str | int | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status if code is None else code}}
    return web.json_response(body, status=status, headers=dict(headers or {}))


def _bad_reply(fault: str, completion: dict[str, Any]) -> web.Response:
    """An HTTP 200 that is no chat completion (the injected faults ``truncated_json``, ``wrong_shape``, ``html``)."""
    if fault == "truncated_json":
        body = json.dumps(completion)
        return web.Response(text=body[: len(body) // 2], content_type="application/json")
    if fault == "wrong_shape":
        return web.json_response({**completion, "choices": {"text": "1"}})
    return web.Response(text="<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")


class ClientGone:
    """A per-row stopping criterion: a row stops at the next token once its client has disconnected;
    ``stopped_after`` holds, per row, the tokens generated by then (None: not stopped for that)."""

    def __init__(self, gone: Sequence[Callable[[], bool]], prompt_width: int):
        self.gone, self.prompt_width = list(gone), prompt_width
        self.stopped_after: list[int | None] = [None] * len(self.gone)

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        for i, gone in enumerate(self.gone):
            if self.stopped_after[i] is None and gone():
                self.stopped_after[i] = input_ids.shape[1] - self.prompt_width
        stopped = [s is not None for s in self.stopped_after]
        return torch.tensor(stopped, dtype=torch.bool, device=input_ids.device)


class RowStreamer:
    """A stopping criterion that stops nothing: after each generated token it hands each streaming row's
    new text (decoded as the final reply is, held back while it ends in a partial character) to that
    request's queue on the server's event loop."""

    def __init__(self, queues: Sequence[asyncio.Queue | None], prompt_width: int, loop, decode):
        self.queues, self.prompt_width, self.loop, self.decode = list(queues), prompt_width, loop, decode
        self.sent = [""] * len(self.queues)

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        for i, queue in enumerate(self.queues):
            if queue is None:
                continue
            text = self.decode(input_ids[i, self.prompt_width :].tolist())
            if text.endswith("\ufffd") or not text.startswith(self.sent[i]) or text == self.sent[i]:
                continue
            self.loop.call_soon_threadsafe(queue.put_nowait, text[len(self.sent[i]) :])
            self.sent[i] = text
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


DATA_URL = re.compile(r"data:image/[\w.+-]+;base64,(?P<data>.*)", re.DOTALL)


def _data_url_image(image_url: Any, where: str):
    """The image of an ``image_url`` part: a base64 data URL, decoded (BadRequest naming ``where`` otherwise)."""
    from rpbench.models.vision import ImageError, image_from_bytes

    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        raise BadRequest(f"{where}.image_url: an object with a url (a data:image/...;base64,... URL)")
    match = DATA_URL.fullmatch(url)
    if match is None:
        raise BadRequest(
            f"{where}.image_url.url: only base64 data URLs (data:image/<type>;base64,...) are accepted; this "
            f"server fetches no URLs and reads no files for its clients (got {url[:40]!r})"
        )
    try:
        data = base64.b64decode(match["data"], validate=True)
    except binascii.Error as error:
        raise BadRequest(f"{where}.image_url.url: not valid base64 ({error})") from error
    try:
        return image_from_bytes(data, f"{where}.image_url")
    except ImageError as error:
        raise BadRequest(str(error)) from error


def _json_body(raw: bytes) -> Any:
    """A request body as JSON, or BadRequest saying why not: invalid UTF-8 or JSON, nesting too deep to
    parse, or a string escape spelling a lone UTF-16 surrogate (no Unicode text)."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"the request body is not valid UTF-8 JSON ({error})") from None
    except RecursionError:
        raise BadRequest("the request body is not valid JSON here: nested too deeply to parse") from None
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("the request body holds a lone UTF-16 surrogate (\\ud800-\\udfff): not Unicode text") from None
    return body


def _text(message: Mapping[str, Any]) -> str:
    """A message's text (its text parts joined)."""
    content = message["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def token_logprobs(
    model, rows: Sequence[Sequence[int]], top: int
) -> list[tuple[list[float | None], list[list[tuple[int, float]] | None]]]:
    """Per row of token ids, each token's log-probability under ``model`` given the tokens before it (None for
    the first) and the ``top`` most likely (id, log-probability) pairs at that position (right-padded batch)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    out = []
    for i, row in enumerate(rows):
        logp = logits[i, : len(row) - 1].float().log_softmax(-1)
        chosen = logp.gather(1, torch.tensor(row[1:], device=device)[:, None])[:, 0].tolist()
        best = logp.topk(top, dim=-1) if top else None
        alternatives = (
            [list(zip(b, v)) for b, v in zip(best.indices.tolist(), best.values.tolist())]
            if best is not None
            else [[] for _ in chosen]
        )
        out.append(([None, *chosen], [None, *alternatives]))
    return out


def context_length(model) -> int:
    """The model's maximum positions (prompt plus reply)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    value = getattr(config, "max_position_embeddings", None)
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{type(model).__name__}: its config has no max_position_embeddings to bound replies by")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    try:
        finite = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise BadRequest(f"{key} must be a finite number, got {shown}")
    return float(value)


@dataclass
class RunningServer:
    server: ChatServer
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` (ends in ``/v1``)."""
        return f"{self.url}/v1"

    @property
    def model_name(self) -> str:
        return self.server.name

    @property
    def model_identity(self) -> str:
        """The unique model id the server also answers to (judge caches key on it)."""
        return self.server.served.identity

    @property
    def stats(self) -> ServerStats:
        return self.server.stats


async def _start(server: ChatServer, options: ServeOptions) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    await web.TCPSite(runner, options.host, options.port).start()
    return runner, runner.addresses[0][1]  # the bound port (a free one when options.port is 0)


@contextmanager
def serve_in_thread(
    model: ServedModel | Mapping[str, Any] | str, options: ServeOptions | Mapping[str, Any] | None = None
) -> Iterator[RunningServer]:
    """Serve ``model`` (loaded, a model config, or a conf/model name) from a background thread."""
    served = model if isinstance(model, ServedModel) else load_served_model(model)
    options = options if isinstance(options, ServeOptions) else ServeOptions.from_mapping(options or {})
    server = ChatServer(served, options)
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            started["runner"], started["port"] = loop.run_until_complete(_start(server, options))
        except BaseException as error:  # noqa: BLE001 - re-raised in the starting thread
            started["error"] = error
            return
        finally:
            ready.set()
        loop.run_forever()
        loop.run_until_complete(started["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="rpbench-serve", daemon=True)
    thread.start()
    ready.wait()
    if "error" in started:
        thread.join()
        raise started["error"]
    try:
        yield RunningServer(server, options.host, started["port"])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


async def _serve_forever(served: ServedModel, options: ServeOptions) -> None:
    server = ChatServer(served, options)
    runner, port = await _start(server, options)
    print(f"rpbench.serve: {server.name} at http://{options.host}:{port}/v1", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    """``key=value`` arguments: ``model=<conf/model name>``, ``model.<key>=...``, and ServeOptions fields."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any("=" not in a for a in args):
        raise SystemExit(f"usage: python -m rpbench.serve model=tiny-qwen2 [model.<key>=<v>] [port=0] ...; got {args}")
    model_name = next((a.split("=", 1)[1] for a in args if a.startswith("model=")), "tiny-qwen2")
    model_overrides = [a for a in args if a.startswith("model.")]
    option_args = [a for a in args if not a.startswith("model=") and not a.startswith("model.")]
    options = ServeOptions.from_mapping(OmegaConf.from_dotlist(option_args))
    served = load_served_model(compose_model_config(model_name, model_overrides))
    try:
        asyncio.run(_serve_forever(served, options))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()


@contextmanager
def local_judge(judge: EndpointSettings) -> Iterator[EndpointSettings]:
    """A ``backend: local`` judge's server, started on 127.0.0.1 for ``judge.server`` (stopped on exit);
    yields the judge config with ``base_url`` and ``model`` pointing at it. The pipeline and the synthesis
    task hand it to ``open_client`` (``rpbench.scoring.chat.client.LocalServer``)."""
    if judge.server is None:
        raise ValueError("judge=local needs judge.server.model (a conf/model name or a model config)")
    with serve_in_thread(judge.server.model, judge.server.serve_options()) as server:
        yield replace(judge, base_url=server.base_url, model=server.model_identity)
