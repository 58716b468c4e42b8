"""The faults an endpoint role is tested against, served by ``conftest.chat_stub`` on 127.0.0.1: HTTP 500, a
reply slower than the client's timeout, cut-off JSON, an HTML page, empty and null content, and a refused
connection (a port nothing listens on)."""

from __future__ import annotations

import json
import socket
import time

from conftest import RawReply

FAULTS = ("500", "timeout", "cut_json", "html", "empty", "null", "refused")
TIMEOUT_S = 0.5  # the client's timeout_s in these tests: a "timeout" reply comes later


def fault_reply(fault: str) -> str | int | RawReply | None:
    """What a faulty endpoint answers (``refused`` has no server: see ``refused_url``)."""
    if fault == "500":
        return 500
    if fault == "timeout":
        time.sleep(3 * TIMEOUT_S)
        return "too late"
    if fault == "cut_json":
        whole = json.dumps({"choices": [{"message": {"role": "assistant", "content": "4"}}]})
        return RawReply(whole[: len(whole) // 2].encode(), "application/json")
    if fault == "html":
        return RawReply(b"<html><body>502 Bad Gateway</body></html>", "text/html")
    if fault == "empty":
        return ""
    if fault == "null":
        return None
    raise ValueError(f"no served fault {fault!r}")


def refused_url() -> str:
    """An address on 127.0.0.1 where nothing listens (a connection there is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
