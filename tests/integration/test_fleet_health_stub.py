"""bench/fleet/health_stub.py, the fleet benchmark's stand-in for every sidecar's ``/status``: it keeps the
sidecar's health contract (``memsync.contracts.health``) for each address it is dialled on, separately:
the document and its ``ETag``, the watch (``?wait=S`` with ``If-None-Match``: 200 at once on another tag,
200 as soon as the document changes, else 304 after S seconds), a ``last_success`` that moves with every
pass without changing the tag, and its control over standard input."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from memsync.contracts.health import SyncHealth, decode_health, tag
from support.server_process import free_port

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from fleet import health_stub  # noqa: E402

FIRST, SECOND = "127.0.0.2", "127.0.0.3"  # two Pods' addresses: every 127/8 address is this machine's


class Stub:
    def __init__(self, stub: health_stub.HealthStub, port: int) -> None:
        self.stub = stub
        self.port = port
        self.http = httpx.AsyncClient(timeout=10, trust_env=False)

    def url(self, address: str, wait: str | None = None) -> str:
        query = "" if wait is None else f"?wait={wait}"
        return f"http://{address}:{self.port}/status{query}"

    async def get(self, address: str, wait: str | None = None, etag: str | None = None) -> httpx.Response:
        headers = {} if etag is None else {"If-None-Match": etag}
        return await self.http.get(self.url(address, wait), headers=headers)

    async def document(self, address: str) -> tuple[SyncHealth, str]:
        response = await self.get(address)
        assert response.status_code == 200
        health = decode_health(response.content)
        assert health is not None, response.text
        return health, response.headers["ETag"]


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    state = health_stub.HealthStub(pass_interval=1.0)
    port = free_port()
    runner = await health_stub.start(state, [FIRST, SECOND], port)
    client = Stub(state, port)
    try:
        yield client
    finally:
        await client.http.aclose()
        await runner.cleanup()


async def test_each_address_gets_its_own_document_and_its_tag(stub: Stub) -> None:
    first, first_tag = await stub.document(FIRST)
    assert first.healthy and first.stores[health_stub.STORE_ID].healthy
    assert first_tag == tag(first)

    stub.stub.set_healthy(FIRST, False)
    down, down_tag = await stub.document(FIRST)
    assert not down.healthy
    assert down.stores[health_stub.STORE_ID].last_error == health_stub.UNHEALTHY_ERROR
    assert down_tag == tag(down) != first_tag
    second, second_tag = await stub.document(SECOND)  # the other Pod is left as it was
    assert second.healthy and second_tag == first_tag


async def test_a_watch_on_the_current_tag_answers_304_after_the_wait(stub: Stub) -> None:
    _, current = await stub.document(FIRST)
    started = time.monotonic()
    response = await stub.get(FIRST, wait="0.4", etag=current)
    assert response.status_code == 304
    assert response.headers["ETag"] == current
    assert time.monotonic() - started >= 0.4


async def test_a_watch_on_another_tag_answers_at_once(stub: Stub) -> None:
    started = time.monotonic()
    response = await stub.get(FIRST, wait="30", etag='"an older document"')
    assert response.status_code == 200
    assert time.monotonic() - started < 5
    health = decode_health(response.content)
    assert health is not None and response.headers["ETag"] == tag(health)


@pytest.mark.parametrize(
    ("wait", "etag"), [("30", None), ("soon", "CURRENT"), ("-1", "CURRENT"), ("nan", "CURRENT")]
)
async def test_a_request_that_is_not_a_watch_answers_at_once(stub: Stub, wait: str, etag: str | None) -> None:
    _, current = await stub.document(FIRST)
    started = time.monotonic()
    response = await stub.get(FIRST, wait=wait, etag=current if etag == "CURRENT" else etag)
    assert response.status_code == 200
    assert time.monotonic() - started < 5


async def test_a_change_wakes_the_watches_of_that_address_only(stub: Stub) -> None:
    _, current = await stub.document(FIRST)
    first = asyncio.create_task(stub.get(FIRST, wait="30", etag=current))
    second = asyncio.create_task(stub.get(SECOND, wait="1.5", etag=current))
    await asyncio.sleep(0.3)
    assert not first.done() and stub.stub.waiting == 2
    started = time.monotonic()
    stub.stub.set_healthy(FIRST, False)
    woken = await asyncio.wait_for(first, 5)
    assert time.monotonic() - started < 2
    assert woken.status_code == 200
    health = decode_health(woken.content)
    assert health is not None and not health.healthy and woken.headers["ETag"] == tag(health) != current
    assert (await second).status_code == 304  # its own document did not change
    assert stub.stub.served["200 after a wait"] == 1 and stub.stub.served["304"] == 1


async def test_last_success_moves_with_the_passes_and_the_tag_does_not(stub: Stub) -> None:
    before, before_tag = await stub.document(FIRST)
    await asyncio.sleep(1.2)  # more than one pass of 1 s; the times have whole seconds
    after, after_tag = await stub.document(FIRST)
    moved = (
        before.stores[health_stub.STORE_ID].last_success,
        after.stores[health_stub.STORE_ID].last_success,
    )
    assert moved[0] is not None and moved[1] is not None and moved[1] > moved[0]
    assert after_tag == before_tag


def test_the_stub_is_driven_over_its_standard_input(tmp_path: Path) -> None:
    address, port = "127.0.0.4", free_port()
    script = ROOT / "bench" / "fleet" / "health_stub.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--listen", address, "--port", str(port), "--pass-interval", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().split() == ["ready", str(port)]
        url = f"http://{address}:{port}/status"
        assert httpx.get(url, trust_env=False).json()["healthy"] is True

        def say(line: str) -> str:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            return proc.stdout.readline().strip()

        assert say(f"unhealthy {address}") == f"ok unhealthy {address}"
        assert httpx.get(url, trust_env=False).json()["healthy"] is False
        assert say("restart everything").startswith("error")
        stats = json.loads(say("stats"))
        assert stats["served"] == {"200": 2} and stats["addresses"] == 1
        proc.stdin.close()  # the benchmark ended: so does the stub
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
