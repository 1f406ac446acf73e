"""The sidecar's ``/status`` watch and its shutdown: a watch the operator holds must not hold up the sidecar's
end (aiohttp's shutdown waits for every handler in flight; a held watch kept a sidecar past its Pod's grace
period, SIGKILLed after its final flush had reported)."""

from __future__ import annotations

import asyncio

import httpx

from memsync.agent.metrics import Metrics, MetricsServer
from memsync.contracts.health import STATUS_PATH, SyncHealth, tag


async def test_stopping_answers_a_held_watch_at_once() -> None:
    health = SyncHealth(healthy=True, stores={})
    server = MetricsServer(Metrics(), host="127.0.0.1", port=0, health=lambda: health)
    port = await server.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        held = asyncio.create_task(
            http.get(f"{STATUS_PATH}?wait=60", headers={"If-None-Match": tag(health)}, timeout=90)
        )
        await asyncio.sleep(0.5)  # the watch is held
        assert not held.done()
        await asyncio.wait_for(server.stop(), timeout=15)  # not the watch's 60 s
        answer = await asyncio.wait_for(held, timeout=15)
    assert answer.status_code == 304
