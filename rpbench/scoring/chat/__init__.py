"""rpbench's one OpenAI-compatible chat client (``client``: async, retried, cached in SQLite by ``cache``),
used by the judge, the user simulator, endpoint generation and synthesis alike; which key an endpoint is sent
(``endpoints``) and whether an endpoint role's requests measured anything (``health``).

    with open_client(run.judge, local_server) as client:   # judge=local: the server handed in
        results = client.ask_many([ChatRequest(...), ...])
"""

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
    "open_client",
]
