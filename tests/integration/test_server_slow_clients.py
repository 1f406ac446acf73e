"""Slow and vanishing clients over real sockets: half-sent requests are dropped after the read deadline, and a
client that hangs up mid-body costs one INFO line, not an ERROR with a traceback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningStoreServer, launch_store_server

READ_TIMEOUT_S = 1.0
WAIT_S = 20.0  # far above the deadline: a socket still open after this was never dropped


@pytest.fixture(params=["httptools", "h11"])
def deadline_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningStoreServer]:
    """The server with a short read deadline, on each HTTP/1.1 implementation (each has its own deadline
    code)."""
    args = ("--request-read-timeout", str(READ_TIMEOUT_S), "--http", request.param)
    server = launch_store_server(tmp_path / "srv", args)
    try:
        yield server
    finally:
        server.stop()


def _head(server: RunningStoreServer, body_length: int, path: str = "/v1/memory_stores") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {server.admin_key}\r\n"
        f"content-type: application/json\r\nContent-Length: {body_length}\r\n\r\n"
    ).encode()


def _partial_requests(server: RunningStoreServer) -> list[bytes]:
    """What each hanging client sends before going quiet: nothing, part of the request line, part of the
    headers, all headers and part of a body, a chunked body never ended."""
    full_head = _head(server, 100)
    chunked = (
        f"POST /v1/memory_stores HTTP/1.1\r\nHost: x\r\nx-api-key: {server.admin_key}\r\n"
        'Transfer-Encoding: chunked\r\n\r\n5\r\n{"nam\r\n'
    ).encode()
    return [b"", b"POST /v1/memory_st", full_head[:60], full_head + b'{"name": "half', chunked]


def _wait_closed(sock: socket.socket, until: float) -> bool:
    """True once the peer closed (EOF or reset); False if it was still open at ``until`` (monotonic)."""
    sock.settimeout(max(0.01, until - time.monotonic()))
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def _connect(server: RunningStoreServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)


def test_half_sent_requests_are_dropped_after_the_read_deadline(deadline_server: RunningStoreServer) -> None:
    sent = _partial_requests(deadline_server) * 5  # 25 hanging clients
    socks = [_connect(deadline_server) for _ in sent]
    started = time.monotonic()
    for sock, data in zip(socks, sent, strict=True):
        sock.sendall(data)
    try:
        closed = [_wait_closed(sock, started + WAIT_S) for sock in socks]
        elapsed = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    assert all(closed), f"{closed.count(False)} of {len(socks)} half-sent requests were still held"
    # They were dropped by the deadline, not refused at once.
    assert elapsed >= READ_TIMEOUT_S * 0.9
    # ...and the server still answers.
    with _connect(deadline_server) as sock:
        body = b'{"name": "after"}'
        sock.sendall(_head(deadline_server, len(body)) + body)
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
    log = deadline_server.log_text()
    assert log.count("dropped a connection: its request did not arrive in time") == len(sent), log
    assert "ERROR" not in log and "Traceback" not in log, log


def test_a_slow_request_within_the_deadline_is_served(deadline_server: RunningStoreServer) -> None:
    body = b'{"name": "slow but in time"}'
    with _connect(deadline_server) as sock:
        sock.sendall(_head(deadline_server, len(body)))
        time.sleep(READ_TIMEOUT_S / 3)
        sock.sendall(body[:5])
        time.sleep(READ_TIMEOUT_S / 3)
        sock.sendall(body[5:])
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
        # The deadline is per request: the same keep-alive connection serves a second one later.
        time.sleep(READ_TIMEOUT_S * 0.6)
        sock.sendall(_head(deadline_server, len(body)) + body)
        reply = b""
        while b"HTTP/1.1 200" not in reply:
            chunk = sock.recv(4096)
            assert chunk, "the connection was closed before the second answer"
            reply += chunk


def test_a_client_gone_mid_body_logs_one_info_line(store_server: RunningStoreServer) -> None:
    before = store_server.log_text()
    with _connect(store_server) as sock:
        sock.sendall(_head(store_server, 100) + b'{"name": "gone')
        time.sleep(0.2)  # let the server start reading the body
    deadline = time.monotonic() + WAIT_S
    while "client disconnected before its request body arrived" not in store_server.log_text()[len(before) :]:
        assert time.monotonic() < deadline, store_server.log_text()[len(before) :]
        time.sleep(0.05)
    new = store_server.log_text()[len(before) :]
    lines = [line for line in new.splitlines() if "client disconnected" in line]
    assert len(lines) == 1 and " INFO " in lines[0], new
    assert "path=/v1/memory_stores" in lines[0]
    assert "ERROR" not in new and "Traceback" not in new, new
