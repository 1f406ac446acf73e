"""The store server's metrics (Prometheus) and access log.

One ASGI middleware times every request (``record``: also for a probe the HTTP protocol answers itself,
``http.probe``) and, when it is answered, counts it by route template (never the
raw path: ids would make unbounded label sets), method and status, observes its latency, and writes one
structured access-log line: request id, method, route, path, status, duration, client address. No header,
no query string and no body is logged, and a path segment shaped like a credential (``looks_like_credential``:
a token pasted where an id belongs) is written as ``[redacted]``, so no credential reaches the log even by
mistake.

With ``--workers`` above 1 the workers share their metrics through ``PROMETHEUS_MULTIPROC_DIR`` (set by
``serve``), so ``/metrics`` answers for the whole server whichever worker takes the scrape.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from memsync.api.ids import looks_like_credential
from memsync.server.storage.database import Database

access_log = logging.getLogger("memsync.server.access")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "memsync_store_requests",
    "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "memsync_store_request_duration_seconds",
    "Time to answer a request, by route template and method",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
POOL = Gauge(
    "memsync_store_db_pool_connections",
    "PostgreSQL connection pool of the server processes: size, available, waiting requests, max",
    ["state"],
    multiprocess_mode="livesum",
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


REDACTED = "[redacted]"


def redact_path(path: str) -> str:
    """``path`` with every segment shaped like a credential replaced by ``[redacted]``."""
    return "/".join(REDACTED if looks_like_credential(part) else part for part in path.split("/"))


@dataclass(frozen=True)
class _Route:
    path: str


_HEALTHZ_ROUTE = _Route("/healthz")
_HEALTHZ_BODY = b'{"status":"ok"}'
_HEALTHZ_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(_HEALTHZ_BODY)).encode()),
]


async def answer_healthz(scope: Scope, send: Send) -> None:
    """``GET /healthz`` answered here, before the admission gate and the router: it is never refused and
    costs the server next to nothing (``bench/store_rate.py`` measures the server against it as its floor)."""
    scope["route"] = _HEALTHZ_ROUTE
    await send({"type": "http.response.start", "status": 200, "headers": list(_HEALTHZ_HEADERS)})
    await send({"type": "http.response.body", "body": _HEALTHZ_BODY})


#: (route, method, status) -> that request count's and latency histogram's labelled series. The labels are
#: route templates, methods and statuses, so the set is small; ``labels()`` takes a lock and builds a key on
#: every call, a noticeable part of the cheapest requests' cost.
_SERIES: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}


def _series(route: str, method: str, status: int) -> tuple[Counter, Histogram]:
    key = (route, method, status)
    found = _SERIES.get(key)
    if found is None:
        found = _SERIES[key] = (REQUESTS.labels(route, method, str(status)), LATENCY.labels(route, method))
    return found


def route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, *, access_logs: bool = True) -> None:
        self.app = app
        self.access_logs = access_logs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            if scope.get("path") == "/healthz" and scope.get("method") == "GET":
                await answer_healthz(scope, send_status)
            else:
                await self.app(scope, receive, send_status)
        finally:
            record(scope, status, time.perf_counter() - started, access_logs=self.access_logs)


def record(scope: Scope, status: int, elapsed_s: float, *, access_logs: bool) -> None:
    """Count an answered request, observe its latency and (``access_logs``) write its access-log line: for
    every request, whether ``ObserveMiddleware`` saw it or the HTTP protocol answered it itself."""
    route, method = route_of(scope), scope.get("method", "")
    if route != "/metrics":
        count, latency = _series(route, method, status or 500)
        count.inc()
        latency.observe(elapsed_s)
    if access_logs:
        client = scope.get("client")
        access_log.info(
            "request",
            extra={
                "request_id": scope.get("state", {}).get("request_id"),
                "method": method,
                "route": route,
                "path": redact_path(str(scope.get("path", ""))),
                "status": status or None,
                "duration_ms": round(elapsed_s * 1000, 2),
                "client": f"{client[0]}:{client[1]}" if client else None,
            },
        )


def render_metrics(db: Database) -> tuple[bytes, str]:
    """The Prometheus text of the whole server (all workers when they share a directory)."""
    for state, value in db.pool_stats().items():
        POOL.labels(state).set(value)
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return _generate_latest(registry), CONTENT_TYPE_LATEST
    return _generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def router(db: Database) -> APIRouter:
    """``/healthz`` and ``/metrics``: unauthenticated, outside the API's schema."""
    router = APIRouter()

    @router.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        """HEAD /healthz (GET is answered by ``ObserveMiddleware``, before the gate and the router)."""
        return {"status": "ok"}

    @router.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus metrics (no credentials: counts and timings only; restrict it at the network)."""
        body, content_type = render_metrics(db)
        return Response(body, media_type=content_type)

    return router
