"""export.push_to_hub against a Hub stand-in on 127.0.0.1: the real huggingface_hub client, no network."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

TOKEN = "hf_test_token_never_written"


class FakeHub(BaseHTTPRequestHandler):
    """Answers the four calls HfApi.create_repo + upload_folder make for small files; records each request."""

    requests: list[tuple[str, str | None, bytes]] = []

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.requests.append((f"GET {self.path}", self.headers.get("authorization"), b""))
        self._answer(404, {"error": "not served"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.requests.append((f"POST {self.path}", self.headers.get("authorization"), body))
        host = self.headers["host"]
        if self.path == "/api/repos/create":
            self._answer(200, {"url": f"http://{host}/me/card-test", "name": "me/card-test", "id": "1"})
        elif self.path == "/api/validate-yaml":
            self._answer(200, {"errors": [], "warnings": []})
        elif self.path.endswith("/preupload/main"):
            files = json.loads(body)["files"]
            modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files]
            self._answer(200, {"files": modes, "commitOid": "0" * 40})
        elif self.path.endswith("/commit/main"):
            self._answer(200, {"commitUrl": f"http://{host}/me/card-test/commit/{'1' * 40}", "commitOid": "1" * 40})
        else:
            self._answer(404, {"error": "not served"})


@pytest.fixture
def hub() -> Iterator[tuple[str, list]]:
    FakeHub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", FakeHub.requests
    server.shutdown()
    server.server_close()


def short_run_settings(endpoint: str) -> list[str]:
    return [
        "trainer.max_steps=1",
        "evaluator=none",
        "trainer.enable_progress_bar=false",
        f"export.hub.endpoint={endpoint}",
        "export.hub.token_env=RPBENCH_TEST_HUB_TOKEN",
    ]


@pytest.mark.slow
def test_push_off_sends_nothing(tmp_path, hub, monkeypatch, run_in_process):
    """In-process (the Hub client here is offline: an attempted upload would fail the run or reach the stand-in)."""
    endpoint, requests = hub
    monkeypatch.setenv("RPBENCH_TEST_HUB_TOKEN", TOKEN)
    run_in_process(tmp_path / "run", *short_run_settings(endpoint))
    assert requests == []
    assert "hub_commit" not in json.loads((tmp_path / "run" / "metrics.json").read_text())


@pytest.mark.slow
def test_push_uploads_the_model_folder_with_its_card_and_writes_no_token(tmp_path, hub, run_script):
    endpoint, requests = hub
    out = tmp_path / "run"
    result = run_script(  # a process of its own: the Hub client reads HF_HUB_OFFLINE when imported
        "run.py",
        f"hydra.run.dir={out}",
        *short_run_settings(endpoint),
        "export.push_to_hub=true",
        "export.hub.repo_id=me/card-test",
        HF_HUB_OFFLINE="0",
        RPBENCH_TEST_HUB_TOKEN=TOKEN,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    calls = [call for call, _, _ in requests]
    assert calls == [
        "POST /api/repos/create",
        "POST /api/validate-yaml",  # the model card's front matter
        "POST /api/models/me/card-test/preupload/main",
        "POST /api/models/me/card-test/commit/main",
    ]
    assert all(auth == f"Bearer {TOKEN}" for _, auth, _ in requests)
    assert json.loads(requests[0][2]) == {
        "name": "card-test",
        "organization": "me",
        "visibility": "private",
        "type": "model",
    }
    lines = [json.loads(line) for line in requests[-1][2].decode().splitlines()]
    uploaded = {e["value"]["path"]: base64.b64decode(e["value"]["content"]) for e in lines if e["key"] == "file"}
    on_disk = {
        p.relative_to(out / "model").as_posix(): p.read_bytes() for p in (out / "model").rglob("*") if p.is_file()
    }
    assert uploaded == on_disk and "README.md" in uploaded and "model.safetensors" in uploaded
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["hub_commit"] == f"{endpoint}/me/card-test/commit/{'1' * 40}"
    for written in out.rglob("*"):
        if written.is_file() and written.suffix in {".json", ".yaml", ".log", ".md", ".csv"}:
            assert TOKEN not in written.read_text(errors="replace"), written
