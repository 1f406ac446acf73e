"""Refusals by the event loop's lag, over real sockets against the real app on uvicorn's httptools protocol:
requests that arrive while the loop is busy past ``max_loop_lag_s`` are answered 503 in the API's envelope
before any ASGI task exists for them; ``/healthz`` is still answered; a loop on time refuses nothing; a
loop that was late because the process was not running (no CPU used) refuses nothing either."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client import REGISTRY

from conftest import API_HEADERS
from memsync.server import create_app
from memsync.server.http.loop_lag import LoopLag
from memsync.server.listen import bind
from memsync.server.protocol import uvicorn_config

ADMIN_KEY = "sk-ant-admin-test-loop-lag-0123456789"
MAX_LAG_S = 0.05
BLOCK_S = 0.4  # the loop is held this long; requests sent meanwhile are read BLOCK_S late at most
HEADERS = {**API_HEADERS, "x-api-key": ADMIN_KEY}

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
HOLDING = threading.Event()  # set while a blocker holds the loop


def spin(seconds: float) -> None:
    """The process busy on the event loop: CPU time spent, nothing else served."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def with_blockers(app: ASGIApp) -> ASGIApp:
    """``POST /test/spin`` holds the loop busy (CPU), ``POST /test/sleep`` holds it idle (a blocking sleep:
    late, but the process uses no CPU); every other request goes to the real app."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        path = scope.get("path")
        if scope["type"] == "http" and path in ("/test/spin", "/test/sleep"):
            HOLDING.set()
            (spin if path == "/test/spin" else time.sleep)(BLOCK_S)
            HOLDING.clear()
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return wrapped


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@pytest.fixture
def server_url(tmp_path: Path) -> Iterator[str]:
    app = create_app(tmp_path / "store.db", ADMIN_KEY, "http://store.test", access_logs=False)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = _Server(
        uvicorn_config(with_blockers(app), host="127.0.0.1", port=port, max_loop_lag_s=MAX_LAG_S)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def shed_by_lag() -> float:
    return REGISTRY.get_sample_value("memsync_store_requests_shed_total", {"reason": "lag"}) or 0.0


def hold_loop(url: str, blocker: str, pool: ThreadPoolExecutor) -> Future[httpx.Response]:
    """Send ``blocker`` and return once it holds the loop: what is sent next waits unread until it ends."""
    client = httpx.Client(base_url=url, timeout=30)
    HOLDING.clear()
    held = pool.submit(client.post, blocker)
    held.add_done_callback(lambda _: client.close())
    assert HOLDING.wait(10), "the blocker never ran"
    return held


def while_blocked(url: str, blocker: str, paths: list[str]) -> list[httpx.Response]:
    """Hold the loop with ``blocker``, and meanwhile send one request for each of ``paths``, each on a
    connection of its own opened before the loop was held."""
    clients = [httpx.Client(base_url=url, headers=HEADERS, timeout=30) for _ in paths]
    try:
        for client in clients:  # connected (and the lag monitor started) while the loop is on time
            assert client.get("/healthz").status_code == 200
        with ThreadPoolExecutor(len(paths) + 1) as pool:
            held = hold_loop(url, blocker, pool)
            answers = [pool.submit(c.get, p) for c, p in zip(clients, paths, strict=True)]
            assert held.result().status_code == 204
            return [a.result() for a in answers]
    finally:
        for client in clients:
            client.close()


def test_requests_read_while_the_loop_is_busy_and_late_are_refused_at_once(server_url: str) -> None:
    before = shed_by_lag()
    listing, healthz = while_blocked(server_url, "/test/spin", ["/v1/memory_stores", "/healthz"])
    assert listing.status_code == 503, listing.text
    assert listing.headers["retry-after"] == "1"
    assert listing.headers["request-id"].startswith("req_")
    body = listing.json()
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    assert body["request_id"] == listing.headers["request-id"]
    assert healthz.status_code == 200  # never refused
    assert shed_by_lag() == before + 1
    with httpx.Client(base_url=server_url, headers=HEADERS, timeout=30) as client:
        again = client.get("/v1/memory_stores")  # the same kind of request, the loop on time again
    assert again.status_code == 200, again.text


def test_a_loop_late_because_the_process_was_not_running_refuses_nothing(server_url: str) -> None:
    before = shed_by_lag()
    (listing,) = while_blocked(server_url, "/test/sleep", ["/v1/memory_stores"])
    assert listing.status_code == 200, listing.text
    assert shed_by_lag() == before


def test_a_refused_request_with_a_body_leaves_its_connection_usable(server_url: str) -> None:
    with httpx.Client(base_url=server_url, headers=HEADERS, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        with ThreadPoolExecutor(2) as pool:
            held = hold_loop(server_url, "/test/spin", pool)
            refused = pool.submit(client.post, "/v1/memory_stores", json={"name": "Refused"})
            assert held.result().status_code == 204
            assert refused.result().status_code == 503
        created = client.post(
            "/v1/memory_stores", json={"name": "Kept"}
        )  # the same connection, its body read
        assert created.status_code == 200, created.text
        names = [s["name"] for s in client.get("/v1/memory_stores").json()["data"]]
    assert names == ["Kept"]  # nothing of the refused request was done


def test_the_lag_monitor_reads_late_only_in_proportion_to_the_cpu_used() -> None:
    async def measure(block: Callable[[float], None]) -> float:
        lag = LoopLag(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        block(0.3)
        return lag.behind()

    assert asyncio.run(measure(spin)) > MAX_LAG_S  # about 0.29 s, less when the machine runs it less
    assert asyncio.run(measure(time.sleep)) < MAX_LAG_S
