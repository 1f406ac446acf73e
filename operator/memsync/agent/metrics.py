"""Prometheus metrics of the sync agent and its small HTTP endpoint (``/metrics``, ``/readyz``, ``/healthz``).

Each ``Metrics`` has its own registry, so several engines in one test process never collide. ``/metrics`` is
prometheus_client's own aiohttp handler (content negotiation, OpenMetrics, compression).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from memsync.contracts.health import STATUS_PATH, WAIT_PARAM, SyncHealth, encode_health, tag, wait_seconds
from memsync.contracts.runner import FINAL_PATH

if TYPE_CHECKING:  # aiohttp is imported only when the endpoint starts: mount and flush start faster
    from aiohttp import web

logger = logging.getLogger("memsync.agent.metrics")


class RequestCount(Collector):
    """``memsync_http_requests_total``: a counter read at scrape time from the count the store client keeps
    (every HTTP attempt, retries included), so the exported value is never a copy that can lag or be
    overwritten."""

    NAME = "memsync_http_requests"
    HELP = "HTTP requests sent to the store API (every attempt, retries included)"

    def __init__(self) -> None:
        self.source: Callable[[], int] = lambda: 0

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.NAME, self.HELP)

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.NAME, self.HELP, value=self.source())


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.passes = Counter(
            "memsync_sync_passes", "Store sync passes, by outcome", ["store", "outcome"], registry=r
        )
        self.pass_seconds = Histogram(
            "memsync_sync_pass_duration_seconds",
            "Duration of one store sync pass",
            ["store"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.uploads = Counter(
            "memsync_uploads", "Memories uploaded (created or updated)", ["store"], registry=r
        )
        self.downloads = Counter(
            "memsync_downloads", "Memories written to disk from the store", ["store"], registry=r
        )
        self.deletes = Counter(
            "memsync_remote_deletes", "Local deletions propagated to the store", ["store"], registry=r
        )
        self.conflicts = Counter(
            "memsync_conflicts", "Local edits that lost to a remote change", ["store"], registry=r
        )
        self.refused = Counter(
            "memsync_refused_files", "Files the server (or local checks) refused", ["store"], registry=r
        )
        self.refused_paths = Gauge(
            "memsync_refused_paths",
            "Paths not synced now: refused by the server, or that cannot be a memory or a local file",
            ["store"],
            registry=r,
        )
        self.unreadable = Gauge(
            "memsync_unreadable_files", "Local files or folders the agent cannot read", ["store"], registry=r
        )
        self.held_deletes = Gauge(
            "memsync_held_deletes",
            "Local deletions held back by the per-pass delete cap at the last sync",
            ["store"],
            registry=r,
        )
        self.pending_deletes = Gauge(
            "memsync_pending_deletes", "Local deletions waiting for confirmation", ["store"], registry=r
        )
        self.last_success = Gauge(
            "memsync_last_successful_pass_timestamp_seconds",
            "Unix time of the last successful pass",
            ["store"],
            registry=r,
        )
        self.requests = RequestCount()
        r.register(self.requests)
        self.ready: dict[str, bool] = {}

    def set_ready(self, store: str, ok: bool) -> None:
        self.ready[store] = ok

    @property
    def all_ready(self) -> bool:
        return bool(self.ready) and all(self.ready.values())

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """``/metrics`` (Prometheus text), ``/readyz`` (200 while the last pass of every store succeeded),
    ``/healthz`` (the process is alive), given ``health`` ``/status`` (the sync-health JSON), and given
    ``final`` ``POST /final`` (the session runner's request for the final sync and flush; it answers the
    report once they are done)."""

    def __init__(
        self,
        metrics: Metrics,
        host: str = "0.0.0.0",
        port: int = 9477,
        health: Callable[[], SyncHealth] | None = None,
        final: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.metrics = metrics
        self.health = health
        self.final = final
        self.host = host
        self.port = port
        # How often a held watch of /status looks for a change (the operator sees one at most this late).
        self.watch_check_s = 0.25
        self._runner: web.AppRunner | None = None
        # Set when the server stops: a held watch is answered at once (aiohttp's shutdown waits for every
        # handler in flight, and a watch held past the Pod's grace period got the sidecar SIGKILLed after its
        # final flush had reported, exit 137, which reads as a flush that never reported).
        self._stopping = asyncio.Event()

    async def start(self) -> int:
        from aiohttp import web  # noqa: PLC0415 (lazy: only sync serves HTTP)
        from prometheus_client.aiohttp import make_aiohttp_handler  # noqa: PLC0415 (imports aiohttp)

        app = web.Application()
        app.router.add_get("/metrics", make_aiohttp_handler(self.metrics.registry))
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/healthz", self._healthz)
        if self.health is not None:
            app.router.add_get(STATUS_PATH, self._status)
        if self.final is not None:
            app.router.add_post(FINAL_PATH, self._final)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if self.port == 0 and sockets:
            self.port = int(sockets[0].getsockname()[1])
        logger.info("metrics endpoint listening", extra={"host": self.host, "port": self.port})
        return self.port

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _readyz(self, request: web.Request) -> web.Response:
        from aiohttp import web  # noqa: PLC0415

        if self.metrics.all_ready:
            return web.Response(text="ready\n")
        waiting = sorted(s for s, ok in self.metrics.ready.items() if not ok)
        return web.Response(status=503, text=f"not ready: {', '.join(waiting) or 'starting'}\n")

    async def _status(self, request: web.Request) -> web.Response:
        """The health document with its tag; a watch (``?wait=S`` with ``If-None-Match``) is answered when
        the tag changes, or with 304 after ``S`` seconds (``memsync.contracts.health``)."""
        from aiohttp import web  # noqa: PLC0415

        assert self.health is not None
        health = self.health()
        current = tag(health)
        wait = wait_seconds(request.query.get(WAIT_PARAM))
        seen = request.headers.get("If-None-Match")
        if wait and seen == current:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait
            while current == seen:
                left = deadline - loop.time()
                if left <= 0 or self._stopping.is_set():
                    return web.Response(status=304, headers={"ETag": current})
                await asyncio.sleep(min(self.watch_check_s, left))
                health = self.health()
                current = tag(health)
        return web.Response(
            body=encode_health(health), content_type="application/json", headers={"ETag": current}
        )

    async def _final(self, request: web.Request) -> web.Response:
        from aiohttp import web  # noqa: PLC0415

        assert self.final is not None
        return web.json_response(await self.final())

    async def _healthz(self, request: web.Request) -> web.Response:
        from aiohttp import web  # noqa: PLC0415

        return web.Response(text="ok\n")
