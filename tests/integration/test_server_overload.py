"""Overload is an answer, not a queue: a real store server with a tiny in-flight bound, held full by
requests whose bodies are still arriving, answers 503 (process) or 429 (credential) at once with
``Retry-After``; ``/healthz`` and ``/metrics`` still answer; the shed counter moves; the held requests and the
queued one are served once their bodies arrive."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from test_server_observe import _sample

from conftest import API_HEADERS, RunningStoreServer, StoreApi, launch_store_server

BODY = json.dumps({"path": "/slow.md", "content": "x"}).encode()


@pytest.fixture
def tiny_server(tmp_path: Path) -> Iterator[RunningStoreServer]:
    server = launch_store_server(
        tmp_path / "srv",
        ("--max-in-flight", "2", "--max-queued", "1", "--max-in-flight-per-credential", "1"),
    )
    try:
        yield server
    finally:
        server.stop()


class SlowUpload:
    """A POST whose headers are sent and whose body is held back: the server has admitted it and is
    reading its body, so it holds a slot until ``finish``."""

    def __init__(self, server: RunningStoreServer, path: str, credential: tuple[str, str], name: str) -> None:
        url = urlsplit(server.url)
        body = BODY.replace(b"/slow.md", f"/{name}.md".encode())
        self.rest = body[1:]
        self.sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=30)
        head = [f"POST {path}?beta=true HTTP/1.1", f"host: {url.netloc}", "content-type: application/json"]
        head += [f"{k}: {v}" for k, v in API_HEADERS.items()]
        head += [f"{credential[0]}: {credential[1]}", f"content-length: {len(body)}", "", ""]
        self.sock.sendall("\r\n".join(head).encode() + body[:1])

    def finish(self) -> int:
        self.sock.sendall(self.rest)
        answer = b""
        while b"\r\n" not in answer:
            chunk = self.sock.recv(4096)
            assert chunk, "the server closed the connection without an answer"
            answer += chunk
        self.sock.close()
        return int(answer.split(b" ", 2)[1])


def _gauge(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} is not in /metrics"
    return float(match.group(1))


def _wait_in_flight(api: StoreApi, expected: float, queued: float = 0) -> None:
    """Until /metrics shows the slow uploads admitted (and queued): they are sent, not yet seen."""
    for _ in range(600):
        text = api.anon("GET", "/metrics").text
        if (
            _gauge(text, "memsync_store_requests_in_flight") == expected
            and _gauge(text, "memsync_store_requests_queued") == queued
        ):
            return
        api.anon("GET", "/healthz")  # a short pause that is itself a request the gate must let through
    raise AssertionError(f"the server never showed {expected} requests in flight and {queued} queued")


def test_a_full_server_sheds_with_retry_after_and_health_still_answers(
    tiny_server: RunningStoreServer,
) -> None:
    api = StoreApi(tiny_server)
    try:
        store = api.new_store()
        token_a = api.session_token([(store, "read_write")])
        token_b = api.session_token([(store, "read_write")])
        token_c = api.session_token([(store, "read_write")])
        path = f"/v1/memory_stores/{store}/memories"
        admin = ("x-api-key", tiny_server.admin_key)
        before = api.anon("GET", "/metrics").text

        held = [
            SlowUpload(tiny_server, path, admin, "held0"),
            SlowUpload(tiny_server, path, ("authorization", f"Bearer {token_a}"), "held1"),
        ]
        _wait_in_flight(api, 2)
        # the server is full and the admin key holds its share while another caller holds the other slot:
        # 429 for it at once, rather than a place in the queue
        noisy = api.admin("GET", path)
        assert noisy.status_code == 429, noisy.text
        assert noisy.headers["retry-after"] == "1"
        assert noisy.json()["error"]["type"] == "rate_limit_error" and noisy.headers["request-id"]
        # another caller waits in the one queue place; the next one is refused with 503
        queued = SlowUpload(tiny_server, path, ("authorization", f"Bearer {token_b}"), "queued")
        _wait_in_flight(api, 2, queued=1)
        shed = api.bearer(token_c, "GET", path)
        assert shed.status_code == 503, shed.text
        assert shed.headers["retry-after"] == "1" and shed.json()["error"]["type"] == "overloaded_error"
        assert api.anon("GET", "/healthz").status_code == 200
        after = api.anon("GET", "/metrics").text
        for reason in ("overload", "credential"):
            delta = _sample(after, "memsync_store_requests_shed_total", reason=reason) - _sample(
                before, "memsync_store_requests_shed_total", reason=reason
            )
            assert delta == 1, (reason, delta)
        log = tiny_server.log_text()
        assert all(t not in log for t in (token_a, token_b, token_c, tiny_server.admin_key))

        assert [upload.finish() for upload in (*held, queued)] == [200, 200, 200]
        assert sorted(api.paths(store)) == ["/held0.md", "/held1.md", "/queued.md"]
        _wait_in_flight(api, 0)
        with httpx.Client(base_url=tiny_server.url, headers=API_HEADERS) as fresh:
            assert fresh.get(path, params={"beta": "true"}, headers=dict([admin])).status_code == 200
    finally:
        api.close()
