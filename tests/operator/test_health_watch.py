"""The sync-health watch: the sidecar's real ``/status`` server (``agent/metrics.py``) and the operator's
watch of it (``controller/sessionmemory/health.py``), with the operator running against the emulator.

- the sidecar holds a watch until what the operator records changes (a pass that only moved
  ``last_success`` does not wake it), or answers 304 when the wait ends;
- a change reaches the SessionMemory's status in well under the old poll interval, and while nothing
  changes the operator writes nothing at all;
- a sidecar without the watch (no ``ETag``) is still read, every ``health_interval``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
from aiohttp import web
from smem_harness import FAST, RUNNING_POD, Cluster, eventually, run_operator, serve_get, smem_body

from memsync.agent.metrics import Metrics, MetricsServer
from memsync.contracts.health import StoreHealth, SyncHealth, encode_health, tag
from memsync.contracts.report import StoreCounts
from memsync.controller.sessionmemory.health import read_health
from memsync.controller.sessionmemory.pod import pod_name_for

STORE = "memstore_01aa"


def health(*, ok: bool = True, last: str = "2026-12-07T12:00:00Z", uploaded: int = 0) -> SyncHealth:
    store = StoreHealth(
        healthy=ok,
        outcome="synced" if ok else "failed",
        last_success=last,
        last_error=None if ok else "memory sync failed: connection refused",
        failing_passes=0 if ok else 1,
        totals=StoreCounts(uploaded=uploaded),
    )
    return SyncHealth(healthy=ok, stores={STORE: store})


@contextlib.asynccontextmanager
async def sidecar(current: Callable[[], SyncHealth]) -> AsyncIterator[str]:
    """The sync agent's own HTTP endpoint on a free loopback port, serving ``current()``."""
    server = MetricsServer(Metrics(), host="127.0.0.1", port=0, health=current)
    server.watch_check_s = 0.05
    port = await server.start()
    try:
        yield f"http://127.0.0.1:{port}/status"
    finally:
        await server.stop()


async def test_the_sidecar_answers_a_watch_when_what_the_operator_records_changes() -> None:
    state = {"doc": health()}
    async with sidecar(lambda: state["doc"]) as url, aiohttp.ClientSession() as http:
        first = await read_health(http, url)
        assert first.health == health() and first.tag == tag(health())
        # Only last_success moved (a pass that changed nothing): the watch is held, then 304.
        state["doc"] = health(last="2026-12-07T12:00:15Z")
        started = time.monotonic()
        held = await read_health(http, url, tag=first.tag, wait=0.5)
        assert held.unchanged and held.tag == first.tag
        assert time.monotonic() - started >= 0.45

        async def change_soon() -> None:
            await asyncio.sleep(0.2)
            state["doc"] = health(uploaded=1)

        changer = asyncio.create_task(change_soon())
        started = time.monotonic()
        changed = await read_health(http, url, tag=first.tag, wait=30)
        await changer
        assert changed.health == health(uploaded=1) and changed.tag == tag(health(uploaded=1))
        assert time.monotonic() - started < 5  # answered on the change, not at the end of the wait
        # A stale tag is answered at once.
        stale = await read_health(http, url, tag='"not-the-current-tag"', wait=30)
        assert stale.health == health(uploaded=1)


@contextlib.asynccontextmanager
async def old_sidecar(current: Callable[[], SyncHealth], reads: list[float]) -> AsyncIterator[str]:
    """A sidecar of an earlier version: the document at once, no ETag, whatever the request asks."""

    async def status(_: web.Request) -> web.Response:
        reads.append(time.monotonic())
        return web.Response(body=encode_health(current()), content_type="application/json")

    async with serve_get("/status", status) as url:
        yield url


def synced(cluster: Cluster, name: str) -> dict[str, str]:
    for cond in cluster.smem_status(name).get("conditions", []):
        if cond["type"] == "Synced":
            return dict(cond)
    return {}


def status_writes(cluster: Cluster) -> int:
    return sum(
        1 for r in list(cluster.kmock) if r.method.name == "PATCH" and str(r.url.path).endswith("/status")
    )


async def start_running(cluster: Cluster, name: str) -> None:
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body(name))
    pod_name = pod_name_for(name)
    await eventually(lambda: cluster.pod(pod_name), what="the sandbox Pod")
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    await eventually(lambda: cluster.smem_status(name).get("phase") == "Running", what="Running")


async def test_a_watched_session_costs_no_write_until_its_health_changes(cluster: Cluster) -> None:
    state = {"doc": health()}
    # A health_interval of a minute: anything that reaches the status within seconds came from the watch.
    async with (
        sidecar(lambda: state["doc"]) as url,
        run_operator(cluster, dataclasses.replace(FAST, health_interval=60.0, health_address=lambda _p: url)),
    ):
        await start_running(cluster, "s1")
        await eventually(lambda: synced(cluster, "s1").get("status") == "True", what="Synced=True")
        writes = status_writes(cluster)
        for second in range(1, 4):  # passes that change nothing but last_success: no write
            state["doc"] = health(last=f"2026-12-07T12:00:{second:02d}Z")
            await asyncio.sleep(0.5)
        assert status_writes(cluster) == writes

        state["doc"] = health(ok=False)
        changed = time.monotonic()
        await eventually(lambda: synced(cluster, "s1").get("status") == "False", what="Synced=False")
        assert time.monotonic() - changed < 5, "the change came with the next read, not from the watch"
        assert "connection refused" in synced(cluster, "s1")["message"]
        await eventually(lambda: "SyncFailing" in cluster.event_reasons("s1"), what="a SyncFailing Event")

        state["doc"] = health(uploaded=2)
        await eventually(lambda: synced(cluster, "s1").get("status") == "True", what="Synced=True again")
        entry = cluster.smem_status("s1")["stores"][0]
        await eventually(lambda: cluster.smem_status("s1")["stores"][0].get("uploaded") == 2, what="totals")
        assert entry["memoryStoreId"] == STORE


async def test_a_sidecar_without_the_watch_is_read_every_health_interval(cluster: Cluster) -> None:
    reads: list[float] = []
    state = {"doc": health()}
    async with (
        old_sidecar(lambda: state["doc"], reads) as url,
        run_operator(cluster, dataclasses.replace(FAST, health_interval=0.3, health_address=lambda _p: url)),
    ):
        await start_running(cluster, "s1")
        await eventually(lambda: synced(cluster, "s1").get("status") == "True", what="Synced=True")
        await eventually(lambda: len(reads) >= 5, what="repeated reads")
        gaps = [b - a for a, b in zip(reads[-4:], reads[-3:], strict=False)]
        assert all(gap >= 0.25 for gap in gaps), gaps  # paced by the interval, not a tight loop
        state["doc"] = health(ok=False)
        await eventually(lambda: synced(cluster, "s1").get("status") == "False", what="Synced=False")
