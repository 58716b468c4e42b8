"""An OpenAI-compatible chat-completions server (HTTP on 127.0.0.1) for any rpbench model config.

    python -m rpbench.serve model=tiny-qwen2 port=0          # port 0: a free port; the URL is printed
    python -m rpbench.serve model=qwen2.5-7b-instruct model.dtype=bfloat16 max_batch_size=16

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``. Concurrent requests are
batched: the first waiting request opens a window of ``batch_wait_ms`` during which up to
``max_batch_size`` requests are collected, and each group with the same sampling settings becomes one
``generate_texts`` call. ``serve_in_thread`` runs it inside the current process (tests, ``judge=local``).

For tests, ``faults`` makes the i-th request fail on purpose (``429``, ``500``, ``garbage`` = a reply
no judge parser accepts, ``slow`` = answer after ``slow_s`` seconds, ``ok`` = no fault), and ``scripted``
answers requests whose last user message contains ``match`` with a fixed ``reply`` instead of the model.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from aiohttp import web
from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
FAULTS = ("ok", "429", "500", "garbage", "slow")
GARBAGE_REPLY = "~~ \u2042 unreadable judge output \u2042 ~~"


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 0
    max_batch_size: int = 8
    batch_wait_ms: float = 5.0
    max_tokens: int = 256
    faults: tuple[str, ...] = ()
    slow_s: float = 5.0
    scripted: tuple[Mapping[str, str], ...] = ()
    served_name: str | None = None

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
        scripted = tuple(values.pop("scripted", ()) or ())
        if not all(isinstance(s, Mapping) and {"match", "reply"} <= set(s) for s in scripted):
            raise ValueError("serve option scripted: a list of {match: str, reply: str}")
        options = cls(faults=faults, scripted=scripted, **values)
        if options.max_batch_size < 1 or options.batch_wait_ms < 0:
            raise ValueError("serve options: max_batch_size must be >= 1 and batch_wait_ms >= 0")
        return options


@dataclass
class ServedModel:
    model: Any
    tokenizer: Any
    stop_ids: list[int]
    name: str


@dataclass
class ServerStats:
    """What the server saw: chat requests (faulted ones included), concurrency, batch sizes."""

    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    faults_served: int = 0
    batch_sizes: list[int] = field(default_factory=list)


class BadRequest(Exception):
    pass


def load_served_model(model_cfg: Mapping[str, Any] | str) -> ServedModel:
    """Load a model config (a mapping, or the name of a ``conf/model`` entry) for serving."""
    from rpbench.models import end_of_turn_ids, load

    cfg = compose_model_config(model_cfg) if isinstance(model_cfg, str) else dict(model_cfg)
    model, tokenizer = load(cfg)
    model.eval()
    return ServedModel(model, tokenizer, end_of_turn_ids(cfg, tokenizer), served_name(cfg))


def served_name(cfg: Mapping[str, Any]) -> str:
    """The model id the server reports (and judge caches key on): the hub id or ``tiny:<family>``; for a
    local folder its name plus a hash of its full path, so no machine path reaches results."""
    name = str(cfg["name_or_path"])
    path = Path(name)
    if not path.exists():
        return name
    return f"local/{path.resolve().name}-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]}"


def compose_model_config(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The ``model`` group entry ``name`` of rpbench's config tree, with ``model.*`` overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"+model={name}", *overrides]
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: compose from its config tree
        cfg = compose(config_name=None, overrides=overrides)
    else:
        if not (CONF_DIR / "model").is_dir():
            raise FileNotFoundError(
                "rpbench's config tree (conf/model) is not next to the package; "
                "pass a model config mapping instead of a name"
            )
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=None, overrides=overrides)
    return OmegaConf.to_container(cfg.model, resolve=True)  # type: ignore[return-value]


class ChatServer:
    """The aiohttp application around one loaded model; generation runs on one worker thread."""

    def __init__(self, served: ServedModel, options: ServeOptions):
        self.served, self.options = served, options
        self.name = options.served_name or served.name
        self.stats = ServerStats()
        self._queue: asyncio.Queue | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rpbench-generate")
        self._batcher: asyncio.Task | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.on_startup.append(self._start_batcher)
        app.on_cleanup.append(self._stop_batcher)
        return app

    async def _start_batcher(self, _app: web.Application) -> None:
        self._queue = asyncio.Queue()
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
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            fault = self.options.faults[index] if index < len(self.options.faults) else "ok"
            if fault != "ok":
                self.stats.faults_served += 1
            if fault in ("429", "500"):
                kind = "rate_limit_error" if fault == "429" else "server_error"
                return _error(int(fault), f"injected fault for request {index}", kind)
            try:
                conversation, params = self._parse(await request.json())
            except (BadRequest, ValueError, TypeError) as error:
                return _error(400, str(error), "invalid_request_error")
            if fault == "slow":
                await asyncio.sleep(self.options.slow_s)
            text = GARBAGE_REPLY if fault == "garbage" else self._scripted(conversation)
            if text is None:
                text, prompt_tokens, completion_tokens = await self._generate(conversation, params)
            else:
                prompt_tokens, completion_tokens = 0, 0
            return web.json_response(self._completion(text, prompt_tokens, completion_tokens, params[0]))
        finally:
            self.stats.in_flight -= 1

    def _parse(self, body: Any) -> tuple[list[dict[str, str]], tuple[int, float, float]]:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        if body.get("stream"):
            raise BadRequest("stream=true is not supported")
        if body.get("n", 1) != 1:
            raise BadRequest("only n=1 is supported")
        if body.get("stop") is not None:
            raise BadRequest("'stop' is not supported: generation stops at the model's end-of-turn token")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        conversation = [self._message(i, m) for i, m in enumerate(messages)]
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or self.options.max_tokens
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        params = (
            int(max_tokens),
            1.0 if temperature is None else float(temperature),
            1.0 if top_p is None else float(top_p),
        )
        if params[0] < 1 or params[1] < 0 or not 0 < params[2] <= 1:
            raise BadRequest("need max_tokens >= 1, temperature >= 0 and 0 < top_p <= 1")
        return conversation, params

    def _message(self, index: int, message: Any) -> dict[str, str]:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(f"messages[{index}]: an object with role system|user|assistant")
        content = message.get("content")
        if isinstance(content, list):
            if any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
                raise BadRequest(f"messages[{index}]: images are not supported ({self.name} is served text-only)")
            if not all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
            ):
                raise BadRequest(f"messages[{index}].content: parts must be {{type: text, text: str}}")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{index}].content: a string or a list of content parts")
        return {"role": message["role"], "content": content}

    def _scripted(self, conversation: list[dict[str, str]]) -> str | None:
        last_user = next((m["content"] for m in reversed(conversation) if m["role"] == "user"), "")
        return next((s["reply"] for s in self.options.scripted if s["match"] in last_user), None)

    async def _generate(self, conversation: list[dict[str, str]], params: tuple) -> tuple[str, int, int]:
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((conversation, params, future))
        return await future

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
            groups: dict[tuple, list] = {}
            for item in batch:
                groups.setdefault(item[1], []).append(item)
            for params, group in groups.items():
                try:
                    outputs = await loop.run_in_executor(self._executor, self._run, [c for c, _, _ in group], params)
                except Exception as error:  # noqa: BLE001 - each waiting request gets it (a 500)
                    outputs = [error] * len(group)
                for (_, _, future), output in zip(group, outputs):
                    if future.done():
                        continue
                    if isinstance(output, Exception):
                        future.set_exception(output)
                    else:
                        future.set_result(output)

    def _run(self, conversations: list[list[dict[str, str]]], params: tuple) -> list[tuple[str, int, int]]:
        from rpbench.eval.generate import generate_texts, render_prompts

        max_tokens, temperature, top_p = params
        tok = self.served.tokenizer
        texts = generate_texts(
            self.served.model,
            tok,
            conversations,
            max_new_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            batch_size=len(conversations),
            stop_ids=self.served.stop_ids,
        )
        prompt_lengths = [len(ids) for ids in render_prompts(tok, conversations)]
        return [
            (text, n, len(tok(text, add_special_tokens=False)["input_ids"])) for text, n in zip(texts, prompt_lengths)
        ]

    def _completion(self, text: str, prompt_tokens: int, completion_tokens: int, max_tokens: int) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length" if completion_tokens >= max_tokens else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


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
