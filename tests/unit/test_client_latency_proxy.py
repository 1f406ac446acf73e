"""bench/latency_proxy.py forwards requests, bodies, headers and statuses unchanged, counts and delays them.

The upstream is a real HTTP server on loopback (uvicorn with a small echo app).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from latency_proxy import LatencyProxy
from memsync.client import StoreClient, errors

Message = MutableMapping[str, Any]


async def echo_app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    """Answers with what it received; ``x-status`` picks the status, ``x-sleep`` delays the answer."""
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    if "x-sleep" in headers:
        await asyncio.sleep(float(headers["x-sleep"]))
    payload = json.dumps(
        {
            "method": scope["method"],
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "headers": headers,
            "body": body.decode("utf-8"),
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": int(headers.get("x-status", "200")),
            "headers": [(b"content-type", b"application/json"), (b"x-upstream", b"echo")],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = _QuietServer(uvicorn.Config(echo_app, lifespan="off", log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done()
        await asyncio.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}/upstream-prefix"
    finally:
        server.should_exit = True
        await task


async def test_forwards_method_path_query_headers_body_and_status(echo_url: str) -> None:
    async with LatencyProxy(echo_url, delay_s=0.0) as proxy, httpx.AsyncClient(base_url=proxy.url) as http:
        body = "héllo\nwörld".encode()
        resp = await http.post(
            "/v1/memory_stores/memstore_1/memories",
            params=[("beta", "true"), ("created_at[gte]", "2026-01-01T00:00:00Z")],
            content=body,
            headers={"x-api-key": "k", "x-status": "418", "content-type": "application/json"},
        )
        assert resp.status_code == 418
        assert resp.headers["x-upstream"] == "echo"
        seen = resp.json()
        assert seen["method"] == "POST"
        assert seen["raw_path"] == "/upstream-prefix/v1/memory_stores/memstore_1/memories"
        assert seen["query"] == "beta=true&created_at%5Bgte%5D=2026-01-01T00%3A00%3A00Z"
        assert seen["body"] == "héllo\nwörld"
        assert seen["headers"]["x-api-key"] == "k"
        assert seen["headers"]["content-length"] == str(len(body))
        assert seen["headers"]["host"] == echo_url.split("/")[2]

        deleted = await http.delete("/v1/x", headers={"x-status": "204"})
        assert deleted.status_code == 204
        assert deleted.content == b""

        # many concurrent requests over the pool of keep-alive connections, each answered with its own body
        answers = await asyncio.gather(
            *(http.put(f"/item/{i}", content=f"body-{i}".encode()) for i in range(40))
        )
        assert [a.json()["body"] for a in answers] == [f"body-{i}" for i in range(40)]
        assert [a.json()["raw_path"] for a in answers] == [f"/upstream-prefix/item/{i}" for i in range(40)]
        assert proxy.request_count == 42


async def test_store_client_through_the_proxy_counts_every_request(echo_url: str) -> None:
    async with LatencyProxy(echo_url, delay_s=0.0) as proxy:
        async with StoreClient(proxy.url + "/prefix", api_key="sk-test", max_retries=0) as client:
            with pytest.raises(errors.InvalidResponse):  # the echo body is not a memory store
                await client.get_store("memstore_1")
            assert client.request_count == 1
        assert proxy.request_count == 1


async def test_adds_at_least_the_delay() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: connection refused
    try:
        async with LatencyProxy(dead, delay_s=0.05) as proxy, httpx.AsyncClient() as http:
            started = time.monotonic()
            resp = await http.get(proxy.url + "/v1/memory_stores")
            elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert elapsed >= 0.05
    assert resp.status_code == 502
    assert resp.json()["type"] == "error"
    assert "upstream failed" in resp.json()["error"]["message"]
    assert proxy.request_count == 1


async def test_standalone_command_serves_until_terminated(echo_url: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = Path(__file__).resolve().parents[2] / "bench" / "latency_proxy.py"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        "--upstream",
        echo_url,
        "--delay-ms",
        "1",
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert f"http://127.0.0.1:{port}" in line.decode()
        async with httpx.AsyncClient() as http:
            resp = await http.get(f"http://127.0.0.1:{port}/ping?x=1")
        assert resp.json()["raw_path"] == "/upstream-prefix/ping"
        assert resp.json()["query"] == "x=1"
    finally:
        proc.terminate()
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    assert b"forwarded 1 request(s)" in out
