"""rpbench's one OpenAI-compatible chat client (``client``: async, retried, cached in SQLite by ``cache``),
used by the judge, the user simulator, endpoint generation and synthesis alike; which key an endpoint is sent
(``endpoints``) and whether an endpoint role's requests measured anything (``health``). Replies can be recorded
(``recording``: ``judge.record_to``) and answered from a recording instead of an endpoint (``replay``:
``judge=replay``); each backend's client is registered in ``client.CLIENTS`` by its module.

    with open_client(run.judge, local_server) as client:   # judge=local: the server handed in
        results = client.ask_many([ChatRequest(...), ...])
"""

from rpbench.core.registry import import_modules
from rpbench.scoring.chat.client import (
    ChatClient,
    ChatRequest,
    ChatResult,
    ClientOpener,
    EndpointConfigError,
    EndpointSettings,
    LocalServer,
    ParsedReply,
    RequestStats,
    client_opener,
    new_client,
    open_client,
)

__all__ = [
    "ChatClient",
    "ChatRequest",
    "ChatResult",
    "ClientOpener",
    "EndpointConfigError",
    "EndpointSettings",
    "LocalServer",
    "ParsedReply",
    "RequestStats",
    "client_opener",
    "new_client",
    "open_client",
]

import_modules(__name__, __path__)  # each backend's module registers its client (client.CLIENTS)
