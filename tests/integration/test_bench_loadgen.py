"""bench/loadgen, the compiled open-loop generator behind ``store_load.py --overload``: every request it is
given is sent on schedule and every answer is read whole and counted by its status, including answers with
a body and answers that close their connection (a new connection takes its place in the pool); told to,
it waits a refusal's Retry-After on that connection as memsync's store client does."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import store_rate  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="bench/loadgen needs a Go toolchain")

ANSWERS = {
    b"/unchanged": b'HTTP/1.1 304 Not Modified\r\netag: "x"\r\n\r\n',
    b"/busy": (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 17\r\nretry-after: 1\r\n"
        b"connection: close\r\n\r\n"
        b'{"type": "error"}'
    ),
    b"/page": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
}
SHED = b"/shed"  # a refusal that keeps its connection
SHED_ANSWER = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\nretry-after: 1\r\n\r\n{}"
WARMUP = b"/healthz"  # answered before the schedule, and not counted


async def serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, opened: list[int], warmed: list[int]
) -> None:
    opened.append(1)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path == WARMUP:
                warmed.append(1)
            answer = (
                SHED_ANSWER
                if path == SHED
                else ANSWERS.get(path, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            )
            writer.write(answer)
            await writer.drain()
            if b"connection: close" in answer:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def test_every_answer_is_read_and_counted_by_status(tmp_path: Path) -> None:
    binary = await asyncio.to_thread(store_rate.build_loadgen, tmp_path)
    assert binary is not None
    opened: list[int] = []
    warmed: list[int] = []
    server = await asyncio.start_server(lambda r, w: serve(r, w, opened, warmed), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    requests = [store_rate.raw_get(port, path.decode(), {"x-probe": "1"}) for path in ANSWERS]
    warmup = store_rate.raw_get(port, WARMUP.decode(), {})
    async with server:
        result = await asyncio.to_thread(
            store_rate.open_loop_compiled, binary, port, requests, 200.0, 1.5, connections=10, warmup=warmup
        )
        for _ in range(500):  # the last new connections may be accepted just after the generator ends
            if len(opened) >= 10 + 100:
                break
            await asyncio.sleep(0.01)
    assert (result.sent, result.unsent) == (300, 0)
    assert result.statuses == {304: 100, 503: 100, 200: 100}
    assert len(result.admitted_ms) == 100 and len(result.shed_ms) == 100
    assert result.failures == 100  # a 200 is neither admitted (304) nor shed (429/503)
    assert len(result.send_lag_ms) == 300
    assert all(ms > 0 for ms in result.admitted_ms + result.shed_ms)
    # apart, the answers to what was scheduled after the onset (the first second: requests 200 to 299,
    # every third of them to each path)
    assert len(result.admitted_steady_ms) == 33 and len(result.shed_steady_ms) == 33
    assert len(opened) == 10 + 100  # the pool, then a new connection for each one the server closed
    assert len(warmed) == 10  # once on each connection of the pool, before the schedule, never counted


@pytest.mark.parametrize("honour", [False, True])
async def test_clients_that_honour_retry_after_wait_it_on_their_connection(
    tmp_path: Path, honour: bool
) -> None:
    binary = await asyncio.to_thread(store_rate.build_loadgen, tmp_path)
    assert binary is not None
    server = await asyncio.start_server(lambda r, w: serve(r, w, [], []), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    requests = [store_rate.raw_get(port, SHED.decode(), {})]
    warmup = store_rate.raw_get(port, WARMUP.decode(), {})
    async with server:
        result = await asyncio.to_thread(
            store_rate.open_loop_compiled,
            binary,
            port,
            requests,
            100.0,
            0.9,  # shorter than the Retry-After: a connection refused once is not used again
            connections=10,
            warmup=warmup,
            honour_retry_after=honour,
        )
    assert result.honours_retry_after is honour
    assert result.statuses == {503: result.sent}
    if honour:
        assert (result.sent, result.unsent) == (10, 80)  # one refusal per connection, then each waits
    else:
        assert (result.sent, result.unsent) == (90, 0)  # a connection refused is used again at once
