"""Running the server: in a background thread of this process (tests, ``judge=local``), or until stopped
(``task=serve``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rpbench.serve.batching import ServerStats
from rpbench.serve.model import ServedModel, load_served_model
from rpbench.serve.server import ChatServer
from rpbench.serve.settings import ServeRun, ServeSettings, serve_settings

if TYPE_CHECKING:
    from rpbench.scoring.chat.client import EndpointSettings

# What builds the application around a loaded model: ChatServer, or a subclass answering some requests itself.
MakeServer = Callable[[ServedModel, ServeSettings], ChatServer]


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


async def start_site(server: ChatServer) -> tuple[web.AppRunner, int]:
    """The server listening; its runner and bound port (a free one when ``port`` is 0)."""
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    await web.TCPSite(runner, server.settings.host, server.settings.port).start()
    return runner, runner.addresses[0][1]


@contextmanager
def serve_in_thread(
    model: ServedModel | Mapping[str, Any] | str,
    settings: ServeSettings | Mapping[str, Any] | None = None,
    make_server: MakeServer = ChatServer,
) -> Iterator[RunningServer]:
    """Serve ``model`` (loaded, a model config, or a conf/model name) from a background thread until the block
    ends; ``settings``: typed, or values over conf/serve/default.yaml's; ``make_server`` builds the server."""
    served = model if isinstance(model, ServedModel) else load_served_model(model)
    settings = settings if isinstance(settings, ServeSettings) else serve_settings(settings or {}, "serve")
    server = make_server(served, settings)
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            started["runner"], started["port"] = loop.run_until_complete(start_site(server))
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
        yield RunningServer(server, settings.host, started["port"])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


async def serve_forever(served: ServedModel, settings: ServeSettings) -> None:
    """Serve until cancelled, printing the address (``rpbench.serve: <name> at <base URL>``) once listening."""
    server = ChatServer(served, settings)
    runner, port = await start_site(server)
    print(f"rpbench.serve: {server.name} at http://{settings.host}:{port}/v1", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def serve_run(run: ServeRun) -> None:
    """``task=serve``: load the model and serve it until interrupted (Ctrl-C)."""
    served = load_served_model(run.model)
    try:
        asyncio.run(serve_forever(served, run.serve))
    except KeyboardInterrupt:
        pass


@contextmanager
def local_judge(judge: EndpointSettings, make_server: MakeServer = ChatServer) -> Iterator[EndpointSettings]:
    """A ``backend: local`` judge's server, started on 127.0.0.1 for ``judge.server`` (stopped on exit);
    yields the judge config with ``base_url`` and ``model`` pointing at it. The pipeline and the synthesis
    task hand it to ``open_client`` (``rpbench.scoring.chat.client.LocalServer``)."""
    if judge.server is None:
        raise ValueError("judge=local needs judge.server.model (a conf/model name or a model config)")
    settings = serve_settings(judge.server.serve_options(), "judge.server")
    with serve_in_thread(judge.server.model, settings, make_server) as server:
        yield replace(judge, base_url=server.base_url, model=server.model_identity)
