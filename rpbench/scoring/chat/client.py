"""One client for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, ``rpbench.serve``): the
judge's, the synthesis generator's and endpoint generation's (``evaluator.backend=endpoint``, which sends each
request's own sampling and keeps no cache).

Requests run concurrently under a limit, are retried with exponential backoff and jitter on 429, 5xx,
timeouts, connection errors and bad replies (an HTTP 200 whose body is not a chat completion: cut-off JSON,
a wrong shape, an HTML page), waiting at least what a ``Retry-After`` header asks (up to
``retry_after_max_s``); a request still failing then is a counted failure, never a verdict. Replies are
cached in SQLite (keyed by endpoint, model, prompt and sampling) so a re-run makes no requests. A prompt
longer than ``max_prompt_chars`` is not sent: a counted failure (``prompts_too_long``) naming the limit. Tokens
and cost are counted, per endpoint role (``judge``, ``simulator``, ``generation``: ``counting_usage``). The API
key is read from the environment variable the config names (see ``rpbench.scoring.chat.endpoints``: none by default
to a host other than OpenAI's), handed to the ``openai`` client and nowhere else: it is not part of the config
object, the cache key, logs or results.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import mimetypes
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC
from email.utils import parsedate_to_datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rpbench.core.errors import ConfigError, RpbenchError
from rpbench.core.progress_bar import progress_bar
from rpbench.core.registry import Registry
from rpbench.core.typed import Problem, Settings, as_dict, plain
from rpbench.scoring.chat.cache import CachedReply, ReplyCache, cache_key
from rpbench.scoring.chat.endpoints import api_key, endpoint_identity
from rpbench.scoring.chat.recording import Recording

if TYPE_CHECKING:  # openai is imported when a request is made: a run without a judge never loads it
    import openai

RETRY_STATUS = {408, 409, 429}
# The client that asks each judge backend (a judge config's ``backend``): the OpenAI-compatible ones share
# ChatClient (registered below); a module of this package registers its own (``replay``: recorded replies).
CLIENTS = Registry("judge backend")
# The endpoint a local judge's cache entries are keyed by: its server's port changes every run, and the model
# name it answers to (the served model's identity) already tells its weights apart.
LOCAL_ENDPOINT = "rpbench.serve"


class EndpointConfigError(RpbenchError, RuntimeError):
    """The judge cannot be used at all (no key, bad credentials, unknown model): stop, do not retry."""


class BadReply(Exception):
    """An HTTP 200 whose body is not a chat completion; retried like a 5xx."""


PARSE_FAILURE_POLICIES = ("wrong", "exclude")


@dataclass(frozen=True, kw_only=True)
class LocalServerSettings(Settings):
    """``judge.server``: what a ``backend: local`` judge serves with ``rpbench.serve`` on 127.0.0.1, and how.
    ``model`` is a conf/model entry's name or a model config mapping (parsed as the model group is, by
    validation and the server). The other keys are ``rpbench.serve``'s options: a judge's YAML sets the
    batching and reply length (conf/judge/local.yaml); a key left out (or null) takes conf/serve/default.yaml's."""

    model: str | Mapping[str, Any]
    max_batch_size: int | None
    batch_wait_ms: float | None
    max_tokens: int | None  # a reply's length when a request names none

    only_some = ("max_batch_size", "batch_wait_ms", "max_tokens")

    def problems(self) -> list[Problem]:
        found: list[Problem] = [] if self.model else [("model", "a conf/model name or a model config mapping")]
        for key, minimum in (("max_batch_size", 1), ("max_tokens", 1)):
            if getattr(self, key) is not None and getattr(self, key) < minimum:
                found.append((key, f"an integer >= {minimum}"))
        if self.batch_wait_ms is not None and self.batch_wait_ms < 0:
            found.append(("batch_wait_ms", "a number of milliseconds >= 0"))
        return found

    def serve_options(self) -> dict[str, Any]:
        """The ``rpbench.serve`` options set here (the server's own for the others)."""
        return {key: plain(value) for key, value in as_dict(self).items() if key != "model" and value is not None}


@dataclass(frozen=True, kw_only=True)
class EndpointSettings(Settings):
    """The ``judge`` config group (conf/judge/*.yaml), parsed once at startup (``rpbench.validate``); every
    value comes from the YAML. ``server``: what a ``backend: local`` judge serves (``rpbench.serve.running.local_judge``
    fills ``base_url`` and ``model`` in from the started server; null for an endpoint judge)."""

    backend: str
    model: str
    base_url: str | None
    api_key_env: str | None  # the variable holding the endpoint's key (conf/judge/openai.yaml names OpenAI's)
    multimodal: bool
    concurrency: int
    timeout_s: float
    max_retries: int
    backoff_initial_s: float
    backoff_max_s: float
    # The longest wait a Retry-After header (on a 429/503) is honoured for; longer requests wait this long.
    retry_after_max_s: float
    temperature: float
    top_p: float | None
    parse_tries: int
    # A verdict still unreadable after parse_tries: "wrong" counts it as a 0, "exclude" leaves it out.
    parse_failure: str
    # Above this share of parse failures among a run's judgements, the log and report.md warn.
    warn_parse_failure_rate: float
    # Above this share of requests without a reply after all retries, the log and report.md warn.
    warn_request_failure_rate: float
    # The longest prompt (characters of its messages' text) a request may send; a longer one is a failure,
    # not sent (null: no limit).
    max_prompt_chars: int | None
    price_input_per_1m: float
    price_output_per_1m: float
    cache_path: str | None
    progress: bool
    # The most a run may spend on the judge, estimated before it starts ({usd, tokens}; null: no limit).
    budget: Mapping[str, float | None] | None
    server: LocalServerSettings | None
    # A JSONL file every reply is appended to, keyed by its request, for judge=replay (null: none).
    record_to: str | None
    # judge=replay's recorded replies (a record_to file; pkg:// names one inside rpbench).
    replay_from: str | None

    only_some = ("replay_from",)

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.backend not in CLIENTS:
            found.append(("backend", f"one of {', '.join(CLIENTS.names())}"))
        if (self.backend == "replay") != (self.replay_from is not None):
            found.append(("replay_from", "the recorded replies with judge=replay (a JSONL file), null otherwise"))
        if self.backend == "replay" and self.record_to is not None:
            found.append(("record_to", "null with judge=replay (record from an endpoint)"))
        if not self.model.strip():
            found.append(("model", "the judge model's name"))
        for key, minimum in (("concurrency", 1), ("parse_tries", 1), ("max_retries", 0)):
            if getattr(self, key) < minimum:
                found.append((key, f"an integer >= {minimum}"))
        for key in ("timeout_s", "backoff_initial_s", "backoff_max_s", "retry_after_max_s"):
            if getattr(self, key) < 0:
                found.append((key, "a number of seconds >= 0"))
        if self.parse_failure not in PARSE_FAILURE_POLICIES:
            found.append(("parse_failure", f"one of {', '.join(PARSE_FAILURE_POLICIES)}"))
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            found.append(("max_prompt_chars", "null or an integer >= 1 (characters)"))
        for key in ("warn_parse_failure_rate", "warn_request_failure_rate"):
            if not 0 <= getattr(self, key) <= 1:
                found.append((key, "a share in [0, 1]"))
        if self.backend == "vllm" and not self.base_url:
            found.append(("base_url", "the server's address with judge=vllm (e.g. http://host:8000/v1)"))
        if self.backend == "local" and self.server is None:
            found.append(("server", "what judge=local serves: {model: <a conf/model name or a model config>, ...}"))
        return found

    def plain(self) -> dict[str, Any]:
        """The settings as plain data (mappings as dicts), e.g. to merge overrides over them."""
        return plain(self)


@dataclass(frozen=True, kw_only=True)
class NoJudge(Settings):
    """The judge group's ``judge=none``: no judge (a setting that needs one says so)."""

    backend: Literal["none"]


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to ask. ``prompt_version`` names the prompt template (part of the cache key)."""

    messages: tuple[Mapping[str, Any], ...]
    max_tokens: int
    prompt_version: str
    # This request's sampling parameters instead of the config's temperature and top_p (endpoint generation)
    sampling: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ChatResult:
    """A reply (``text``) or, after all retries, the reason there is none (``error``)."""

    text: str | None
    error: str | None = None
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    no_content: bool = False  # the reply's message content was null (``text`` is then "")


@dataclass(frozen=True)
class ParsedReply:
    """A reply after strict parsing: ``value`` is None on a parse failure (``error`` None) or a failed request."""

    value: Any
    text: str | None
    attempts: int
    error: str | None = None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "request_failure"
        return "parse_failure" if self.value is None else "ok"


@dataclass
class RequestStats:
    """Counters over the client's lifetime. ``requests`` counts HTTP attempts (retries included),
    ``bad_replies`` the attempts answered by an HTTP 200 that was no chat completion, ``retry_wait_s`` the
    seconds waited before retries, ``failures`` the requests that got no reply after all retries (or were not
    sent: ``prompts_too_long`` of them had a prompt beyond ``max_prompt_chars``), ``empty_replies`` the fresh
    replies with no text (null or blank content); tokens and cost count fresh replies only (a cache hit costs
    nothing). Requests asked: ``replies + cache_hits + failures``."""

    requests: int = 0
    replies: int = 0
    cache_hits: int = 0
    retries: int = 0
    bad_replies: int = 0
    retry_wait_s: float = 0.0
    failures: int = 0
    prompts_too_long: int = 0
    empty_replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: RequestStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def asked(self) -> int:
        """The requests asked (each once, however often it was retried)."""
        return self.replies + self.cache_hits + self.failures


ROLES = ("judge", "simulator", "generation")  # what a client asks its endpoint for


@dataclass
class Usage:
    """The counters of the clients closed inside a ``counting_usage`` block, per role."""

    roles: dict[str, RequestStats] = field(default_factory=dict)

    def add(self, role: str, stats: RequestStats) -> None:
        self.roles.setdefault(role, RequestStats()).add(stats)

    def total(self) -> RequestStats:
        summed = RequestStats()
        for stats in self.roles.values():
            summed.add(stats)
        return summed


_totals: list[Usage] = []  # the open ``counting_usage`` blocks


@contextmanager
def counting_usage() -> Iterator[Usage]:
    """The counters of every client closed inside the block, per role (a run's judge cost: their total)."""
    usage = Usage()
    _totals.append(usage)
    try:
        yield usage
    finally:
        _totals.remove(usage)


@CLIENTS.register("openai")
@CLIENTS.register("vllm")
@CLIENTS.register("local")
class ChatClient:
    """Asks an OpenAI-compatible endpoint; ``ask_many`` is the synchronous entry point. ``endpoint``: what
    the cache keys replies by (default: the config's ``base_url``, see ``endpoint_identity``); ``api_key``:
    the key to send (default: read from ``config.api_key_env``); ``label``: the config group errors name;
    ``role``: what it asks for (one of ROLES), the role its counters are summed under. With
    ``config.record_to`` every reply (cached ones too) is appended there for ``judge=replay``."""

    def __init__(
        self,
        config: EndpointSettings,
        endpoint: str | None = None,
        api_key: str | None = None,
        label: str = "judge",
        role: str = "judge",
    ):
        if role not in ROLES:
            raise ValueError(f"ChatClient role {role!r}: one of {', '.join(ROLES)}")
        self.config, self.label, self.role = config, label, role
        self.endpoint = endpoint or endpoint_identity(config.base_url)
        self.stats = RequestStats()
        self._api_key = api_key if api_key is not None else _api_key(config, f"{label}.api_key_env")
        self.cache = ReplyCache(config.cache_path) if config.cache_path else None
        self.recording = Recording(config.record_to) if config.record_to else None

    def sampling(self, request: ChatRequest) -> dict[str, Any]:
        if request.sampling is not None:
            return {**request.sampling, "max_tokens": request.max_tokens}
        params: dict[str, Any] = {"temperature": self.config.temperature, "max_tokens": request.max_tokens}
        if self.config.top_p is not None:
            params["top_p"] = self.config.top_p
        return params

    def ask_many(
        self,
        requests: Sequence[ChatRequest],
        desc: str = "judge",
        on_result: Callable[[int, ChatResult], None] | None = None,
    ) -> list[ChatResult]:
        """Replies in request order (runs its own event loop); ``on_result(i, result)`` as each one arrives."""
        return asyncio.run(self.ajudge_many(requests, desc, on_result))

    async def ajudge_many(
        self,
        requests: Sequence[ChatRequest],
        desc: str = "judge",
        on_result: Callable[[int, ChatResult], None] | None = None,
    ) -> list[ChatResult]:
        limit = asyncio.Semaphore(self.config.concurrency)
        bar = progress_bar(desc=desc, total=len(requests), unit="request", disable=not self.config.progress)
        async with self.connection() as api:

            async def one(i: int, request: ChatRequest) -> ChatResult:
                result = await self._complete(api, limit, request)
                if on_result is not None:
                    on_result(i, result)
                bar.update(1)
                return result

            tasks = [asyncio.ensure_future(one(i, r)) for i, r in enumerate(requests)]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:  # an endpoint that refuses (or a cancel) stops the batch's other requests too
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            finally:
                bar.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """What one ``ajudge_many`` batch sends its requests through: an ``openai`` client of the endpoint."""
        import openai

        api = openai.AsyncOpenAI(
            api_key=self._api_key, base_url=self.config.base_url, timeout=self.config.timeout_s, max_retries=0
        )
        try:
            yield api
        finally:
            await api.close()

    def ask_parsed(
        self, requests: Sequence[ChatRequest], parse: Callable[[str], Any], reask: str, desc: str = "judge"
    ) -> list[ParsedReply]:
        """Ask, parse strictly, and re-ask unreadable replies (the reply and ``reask`` appended) up to
        ``parse_tries`` attempts in all. A reply still unreadable then is a parse failure (value None)."""
        current = list(requests)
        out: list[ParsedReply] = [ParsedReply(None, None, 0)] * len(requests)
        pending = list(range(len(requests)))
        for attempt in range(1, self.config.parse_tries + 1):
            label = desc if attempt == 1 else f"{desc} (re-ask {attempt - 1})"
            results = self.ask_many([current[i] for i in pending], desc=label)
            retry = []
            for i, result in zip(pending, results):
                if result.error is not None:
                    out[i] = ParsedReply(None, None, attempt, result.error)
                    continue
                value = parse(result.text or "")
                out[i] = ParsedReply(value, result.text, attempt)
                if value is None:
                    current[i] = reasked(current[i], result.text or "", reask)
                    retry.append(i)
            pending = retry
            if not pending:
                break
        return out

    async def _complete(self, api: openai.AsyncOpenAI, limit: asyncio.Semaphore, request: ChatRequest) -> ChatResult:
        chars, most = prompt_chars(request.messages), self.config.max_prompt_chars
        if most is not None and chars > most:
            self.stats.prompts_too_long += 1
            self.stats.failures += 1
            return ChatResult(
                None,
                error=f"prompt too long: {chars} characters, above {self.label}.max_prompt_chars={most} (not sent)",
            )
        sampling = self.sampling(request)
        key = None
        if self.cache is not None:
            key = cache_key(self.endpoint, self.config.model, request.prompt_version, request.messages, sampling)
            if (hit := self.cache.get(key)) is not None:
                self.stats.cache_hits += 1
                cached = ChatResult(
                    hit.text, cached=True, prompt_tokens=hit.prompt_tokens, completion_tokens=hit.completion_tokens
                )
                self._record(request, sampling, cached)
                return cached
        async with limit:
            result = await self.answer(api, request, sampling)
        self._record(request, sampling, result)
        if result.error is None:
            self._count_usage(result)
            self.stats.empty_replies += not (result.text or "").strip()
            if self.cache is not None:
                reply = CachedReply(result.text or "", result.prompt_tokens, result.completion_tokens)
                self.cache.put(key, self.config.model, request.prompt_version, reply)
        else:
            self.stats.failures += 1
        return result

    def _record(self, request: ChatRequest, sampling: Mapping[str, Any], result: ChatResult) -> None:
        if self.recording is not None and result.error is None:
            self.recording.add(request.messages, sampling, self.config.model, result)

    async def answer(self, api: openai.AsyncOpenAI, request: ChatRequest, sampling: Mapping[str, Any]) -> ChatResult:
        """The endpoint's reply to ``request`` (retried as the module says), or the reason there is none."""
        import openai

        for attempt in range(self.config.max_retries + 1):
            self.stats.requests += 1
            try:
                raw = await api.chat.completions.with_raw_response.create(
                    model=self.config.model, messages=list(request.messages), n=1, **sampling
                )
                result = read_completion(raw.text, raw.headers.get("content-type"))
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as error:
                raise EndpointConfigError(
                    f"{self.label}: the endpoint refused the request ({type(error).__name__}, "
                    f"status {error.status_code}): check {self.label}.model and the API key"
                ) from None
            except (openai.APIConnectionError, openai.APIStatusError, BadReply) as error:
                if isinstance(error, BadReply):
                    self.stats.bad_replies += 1
                if not _retryable(error) or attempt == self.config.max_retries:
                    return ChatResult(None, error=_describe(error))
                self.stats.retries += 1
                await self._wait(self._delay(attempt, error))
                continue
            self.stats.replies += 1
            return result
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, error: Exception) -> float:
        """Exponential backoff with jitter, or longer when the reply's Retry-After asks (up to the cap)."""
        ceiling = min(self.config.backoff_max_s, self.config.backoff_initial_s * 2**attempt)
        backoff = ceiling * (0.5 + random.random() / 2)
        import openai

        asked = retry_after_s(error.response.headers) if isinstance(error, openai.APIStatusError) else None
        return backoff if asked is None else max(backoff, min(asked, self.config.retry_after_max_s))

    async def _wait(self, seconds: float) -> None:
        """Sleep at least ``seconds`` by the monotonic clock (a timer may fire a little early)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(left)
        self.stats.retry_wait_s += seconds

    def _count_usage(self, result: ChatResult) -> None:
        self.stats.prompt_tokens += result.prompt_tokens
        self.stats.completion_tokens += result.completion_tokens
        self.stats.cost_usd += (
            result.prompt_tokens * self.config.price_input_per_1m
            + result.completion_tokens * self.config.price_output_per_1m
        ) / 1e6

    def close(self) -> None:
        for usage in _totals:
            usage.add(self.role, self.stats)
        if self.cache is not None:
            self.cache.close()


def prompt_chars(messages: Sequence[Mapping[str, Any]]) -> int:
    """The characters of a request's text (a message's content, or its text parts; images not counted)."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, Sequence):
            total += sum(len(part.get("text") or "") for part in content if isinstance(part, Mapping))
    return total


def image_part(path: Path) -> dict[str, Any]:
    """An OpenAI ``image_url`` message part carrying the image file as a base64 data URL."""
    mime = mimetypes.guess_type(path.name)[0] or "image/jpeg"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def reasked(request: ChatRequest, reply: str, reask: str) -> ChatRequest:
    """``request`` continued by its unusable ``reply`` and the ``reask`` message (a new request, not a cache hit)."""
    follow_up = ({"role": "assistant", "content": reply}, {"role": "user", "content": reask})
    return replace(request, messages=(*request.messages, *follow_up))


# How a ``backend: local`` judge gets its server: ``start(judge)`` starts one for ``judge.server`` and yields
# the judge config pointing at it, stopping it on exit (``rpbench.serve.running.local_judge``). The pipeline (or the
# synthesis task) hands it to whoever opens a judge; scoring never imports the server.
LocalServer = Callable[[EndpointSettings], AbstractContextManager[EndpointSettings]]
# What a stage that opens judges receives: ``open_client`` with the local server bound (``client_opener``).
ClientOpener = Callable[[EndpointSettings], AbstractContextManager["ChatClient"]]


@contextmanager
def open_client(config: EndpointSettings, local_server: LocalServer | None = None) -> Iterator[ChatClient]:
    """A client for a judge config; ``backend: local`` first starts ``local_server`` (stopped on exit)
    and points the client at it."""
    if not isinstance(config, EndpointSettings):
        raise TypeError(
            f"open_client takes a EndpointSettings (EndpointSettings.parse(values, where)), got {type(config)}"
        )
    local = config.backend == "local"
    if local and local_server is None:
        raise ValueError(
            "judge=local: no local judge server was handed in: "
            "open_client(config, local_server=rpbench.serve.running.local_judge) (run.py and the pipeline hand it in)"
        )
    with local_server(config) if local else nullcontext(config) as served:
        client = new_client(served, LOCAL_ENDPOINT if local else None)
        try:
            yield client
        finally:
            client.close()


def new_client(
    config: EndpointSettings, endpoint: str | None = None, label: str = "judge", role: str = "judge"
) -> ChatClient:
    """The client of ``config``'s backend (``CLIENTS``); ``ChatClient``'s arguments."""
    return CLIENTS.get(config.backend)(config, endpoint, label=label, role=role)


def backends() -> tuple[str, ...]:
    """The judge group's backends: ``none`` and each registered one."""
    return ("none", *CLIENTS.names())


def client_opener(local_server: LocalServer | None) -> ClientOpener:
    """``open_client`` with ``local_server`` handed in: what a stage that opens judges is given."""
    return partial(open_client, local_server=local_server)


def _api_key(config: EndpointSettings, setting: str) -> str:
    """The key from the configured environment variable (``setting``: its key, for errors); a placeholder for
    keyless local endpoints."""
    try:
        return api_key(config.base_url, config.api_key_env, setting)
    except ConfigError as error:
        raise EndpointConfigError(str(error)) from None


def read_completion(body: str, content_type: str | None) -> ChatResult:
    """The reply text and token usage of a chat-completion body; BadReply when it is not one."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        kind = content_type.split(";")[0].strip() if content_type else "no content type"
        raise BadReply(f"bad reply: body is not JSON ({kind}; {error.msg} at char {error.pos})") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (TypeError, KeyError, IndexError):
        raise BadReply("bad reply: JSON without choices[0].message.content") from None
    finish_reason = data["choices"][0].get("finish_reason")
    if content is not None and not isinstance(content, str):
        raise BadReply(f"bad reply: choices[0].message.content is a {type(content).__name__}, not a string")
    usage = data.get("usage") or {}
    if not isinstance(usage, dict):
        raise BadReply(f"bad reply: usage is a {type(usage).__name__}, not an object")
    tokens = [usage.get(k) or 0 for k in ("prompt_tokens", "completion_tokens")]
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        raise BadReply(f"bad reply: usage token counts are not counts ({tokens})")
    return ChatResult(
        content or "",
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        no_content=content is None,
    )


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds a reply's ``Retry-After`` header asks to wait (seconds or an HTTP date); None without one."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _retryable(error: Exception) -> bool:
    import openai

    if isinstance(error, (openai.APIConnectionError, BadReply)):  # includes timeouts
        return True
    return isinstance(error, openai.APIStatusError) and (error.status_code in RETRY_STATUS or error.status_code >= 500)


def _describe(error: Exception) -> str:
    import openai

    if isinstance(error, openai.APITimeoutError):
        return "timeout"
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}"
    if isinstance(error, BadReply):
        return str(error)
    return type(error).__name__
