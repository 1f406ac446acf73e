"""The sidecars' probe answered by the HTTP protocol itself when its answer is at hand (its credential cached,
its page unchanged): the same 304 as the app's, counted and logged the same, on a connection that stays in
step; anything else (a first probe, a changed page, an unknown store, a proxy's headers) goes to the app."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from memsync.api.secret import decode_work_secret
from memsync.server import create_app
from support.threaded_server import served_on_a_thread

ADMIN_KEY = "sk-test-probe-at-hand-admin-key"
API = {"anthropic-version": "2023-06-01", "anthropic-beta": "agent-memory-2026-07-22"}
LISTING_ROUTE = "/v1/memory_stores/{store_id}/memories"


@dataclass
class Served:
    url: str
    reached_app: list[str]  # the path of every HTTP request the app itself saw


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    app = create_app(tmp_path / "store.db", ADMIN_KEY, "http://store.test", access_logs=True)
    reached: list[str] = []

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            reached.append(scope["path"])
        await app(scope, receive, send)

    with served_on_a_thread(counting) as url:
        yield Served(url, reached)


def answered_304() -> float:
    labels = {"route": LISTING_ROUTE, "method": "GET", "status": "304"}
    return REGISTRY.get_sample_value("memsync_store_requests_total", labels) or 0.0


def a_session(url: str) -> tuple[str, str, str]:
    """A store with a memory, a sessions token with it attached, and the listing's current ETag."""
    with httpx.Client(base_url=url, headers={**API, "x-api-key": ADMIN_KEY}, timeout=30) as admin:
        store = admin.post("/v1/memory_stores", json={"name": "s"}).raise_for_status().json()["id"]
        admin.post(f"/v1/memory_stores/{store}/memories", json={"path": "/a.md", "content": "a"})
        body = {"resources": [{"type": "memory_store", "memory_store_id": store, "access": "read_only"}]}
        secret = admin.post("/v1/memsync/sessions", json=body).raise_for_status().json()["work_secret"]
        etag = admin.get(f"/v1/memory_stores/{store}/memories", params={"view": "basic", "limit": 1})
    return store, decode_work_secret(secret).sessions_token, etag.headers["etag"]


def probe(client: httpx.Client, store: str, etag: str, **headers: str) -> httpx.Response:
    return client.get(
        f"/v1/memory_stores/{store}/memories",
        params={"beta": "true", "view": "basic", "limit": 1},
        headers={"if-none-match": etag, **headers},
    )


def test_a_probe_whose_answer_is_at_hand_is_answered_by_the_protocol_like_the_app(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    store, token, etag = a_session(served.url)
    headers = {**API, "authorization": f"Bearer {token}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as client:
        reached = len(served.reached_app)
        via_app = probe(client, store, etag, **{"x-forwarded-for": "10.0.0.1"})  # a proxy's: the app's way
        assert served.reached_app[reached:] == [f"/v1/memory_stores/{store}/memories"]
        reached, counted = len(served.reached_app), answered_304()
        with caplog.at_level(logging.INFO, logger="memsync.server.access"):
            at_hand = probe(client, store, etag)  # on SQLite the credential is read on the loop if not cached
            again = probe(client, store, etag)
        assert len(served.reached_app) == reached  # answered without the app
        assert answered_304() == counted + 2
        for answer in (via_app, at_hand, again):
            assert answer.status_code == 304 and answer.content == b""
            assert answer.headers["etag"] == etag
            assert answer.headers["cache-control"] == "private, no-cache"
            assert answer.headers["request-id"].startswith("req_")
        assert sorted(at_hand.headers.keys()) == sorted(via_app.headers.keys())
        assert len({a.headers["request-id"] for a in (via_app, at_hand, again)}) == 3
        rid = again.headers["request-id"]
        (line,) = [r for r in caplog.records if getattr(r, "request_id", None) == rid]
        assert (getattr(line, "route", None), getattr(line, "status", None)) == (LISTING_ROUTE, 304)

        # the same connection, in step: another request after it
        assert client.get("/v1/memory_stores/nope/memories").status_code in (401, 403, 404)


def test_what_is_not_at_hand_goes_to_the_app(served: Served) -> None:
    store, token, etag = a_session(served.url)
    headers = {**API, "authorization": f"Bearer {token}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as client:
        assert probe(client, store, etag).status_code == 304  # the credential cached from here on
        with httpx.Client(base_url=served.url, headers={**API, "x-api-key": ADMIN_KEY}) as admin:
            admin.post(f"/v1/memory_stores/{store}/memories", json={"path": "/b.md", "content": "b"})
        changed = probe(client, store, etag)  # the page changed: the app lists it
        assert changed.status_code == 200, changed.text
        assert [m["path"] for m in changed.json()["data"]] == ["/a.md"]
        current = changed.headers["etag"]
        assert current != etag
        unknown = probe(client, "memstore_unknown", current)
        assert unknown.status_code == 404, unknown.text
        proxied = probe(client, store, current, **{"x-forwarded-for": "10.0.0.1"})  # a proxy's client
        assert proxied.status_code == 304
        reached = len(served.reached_app)
        assert probe(client, store, current).status_code == 304  # at hand again
        assert len(served.reached_app) == reached
    assert served.reached_app[-3:] == [
        f"/v1/memory_stores/{store}/memories",
        "/v1/memory_stores/memstore_unknown/memories",
        f"/v1/memory_stores/{store}/memories",
    ]


def read_statuses(sock: socket.socket, count: int) -> list[int]:
    """The statuses of the next ``count`` answers on ``sock`` (each head, then its content-length body)."""
    buffer, statuses = b"", []
    while len(statuses) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"the connection closed after {len(statuses)} answers"
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(fields.get("content-length", "0"))
        while len(buffer) < length:
            buffer += sock.recv(65536)
        buffer = buffer[length:]
        statuses.append(int(lines[0].split(" ")[1]))
    return statuses


def test_probes_pipelined_behind_a_request_are_all_answered_in_order(served: Served) -> None:
    """Probes queued behind a request still being served are started one by one as it ends; none is answered
    inside another's answer (hundreds of them would nest as deep)."""
    store, token, etag = a_session(served.url)
    host = served.url.removeprefix("http://")
    fields = "".join(f"{k}: {v}\r\n" for k, v in API.items())
    listing = f"GET /v1/memory_stores HTTP/1.1\r\nhost: {host}\r\nx-api-key: {ADMIN_KEY}\r\n{fields}\r\n"
    one_probe = (  # as short as a probe can be: as many as can be are read (and queued) at once
        f"GET /v1/memory_stores/{store}/memories?limit=1 HTTP/1.1\r\n"
        f"authorization: Bearer {token}\r\nif-none-match: {etag}\r\n\r\n"
    )
    n = 1500
    with socket.create_connection(("127.0.0.1", int(host.rsplit(":", 1)[1])), timeout=30) as sock:
        sock.sendall((listing + one_probe * n).encode())
        assert read_statuses(sock, 1 + n) == [200] + [304] * n
