"""The store server's admission gate: overload is answered at once, never queued without bound.

Each server process takes at most ``max_in_flight`` requests at a time. A slot that is free while nobody
waits is never refused, whoever asks (idle capacity serves even one busy caller). A request that finds every
slot taken waits in a small queue (``max_queued`` places) for one; when the queue is full too it is answered
``503`` at once. While requests wait, a credential that already holds its share (``per_credential``, in
flight and queued) and is not alone on the server is answered ``429`` at once, so one noisy caller cannot
take every slot from the others. Both answers carry ``Retry-After`` (whole seconds) and the API's error
envelope. ``/healthz``, ``/readyz`` and ``/metrics`` are never gated: a busy
server must still say it is alive and how busy it is.

The decision is ``decide``, a pure function over plain counters; ``AdmissionMiddleware`` keeps the counters
(one event loop per process, so no lock is needed) and renders the answer. A credential is known only by a
short hash of its header (``credential_key``): neither the secret nor its hash is logged or used as a label.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from prometheus_client import Counter, Gauge

from memsync.api import errors as et
from memsync.server.errors import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Decision = Literal["admit", "queue", "overload", "credential"]

#: Never gated: liveness, readiness and the metrics that show the shedding.
UNGATED_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})
DEFAULT_MAX_IN_FLIGHT: Final = 32
DEFAULT_RETRY_AFTER_S: Final = 1
_CREDENTIAL_HEADERS: Final = (b"authorization", b"x-api-key")

SHED = Counter(
    "memsync_store_requests_shed",
    "Requests answered at once without being served: 503 (overload, the process is full) or 429 "
    "(credential, one caller holds its share)",
    ["reason"],
)
IN_FLIGHT = Gauge(
    "memsync_store_requests_in_flight",
    "Requests being served by the server processes (admitted, not yet answered)",
    multiprocess_mode="livesum",
)
QUEUED = Gauge(
    "memsync_store_requests_queued",
    "Requests waiting for a slot in the admission queue of the server processes",
    multiprocess_mode="livesum",
)


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds of one server process. ``max_in_flight=0`` turns the gate off (every request admitted)."""

    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_queued: int = DEFAULT_MAX_IN_FLIGHT // 4
    per_credential: int = DEFAULT_MAX_IN_FLIGHT // 2
    retry_after_s: int = DEFAULT_RETRY_AFTER_S

    @classmethod
    def derived(
        cls,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        *,
        max_queued: int | None = None,
        per_credential: int | None = None,
        retry_after_s: int = DEFAULT_RETRY_AFTER_S,
    ) -> AdmissionLimits:
        """The limits with the queue (a quarter of the slots) and the credential share (half of them) derived
        from ``max_in_flight`` unless given."""
        if max_in_flight < 0:
            raise ValueError(f"max_in_flight must be >= 0, got {max_in_flight}")
        queued = max_in_flight // 4 if max_queued is None else max_queued
        share = max(1, max_in_flight // 2) if per_credential is None else per_credential
        if queued < 0 or share < 1 or retry_after_s < 1:
            raise ValueError("the admission queue must be >= 0, the credential share and Retry-After >= 1")
        return cls(max_in_flight, queued, share, retry_after_s)

    @property
    def enabled(self) -> bool:
        return self.max_in_flight > 0


def decide(limits: AdmissionLimits, *, in_flight: int, queued: int, credential_held: int) -> Decision:
    """What to do with one more request, given the process's requests in flight and queued, and how many of
    both its credential already holds (0 for an anonymous request)."""
    if not limits.enabled:
        return "admit"
    if in_flight < limits.max_in_flight and queued == 0:
        return "admit"  # work-conserving: a free slot nobody waits for goes to whoever asks
    others = in_flight + queued - credential_held
    if credential_held >= limits.per_credential and others > 0:
        return "credential"
    if queued < limits.max_queued:
        return "queue"
    return "overload"


def credential_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """A short, one-way name for the request's credential (its header hashed), or None for none."""
    for name, value in headers:
        if name in _CREDENTIAL_HEADERS and value:
            return hashlib.blake2b(value, digest_size=8).hexdigest()
    return None


def shed_error(decision: Decision, limits: AdmissionLimits) -> ApiError:
    retry = {"retry-after": str(limits.retry_after_s)}
    if decision == "credential":
        return ApiError(
            429, et.RATE_LIMIT, "too many requests in flight for this credential; retry later", headers=retry
        )
    return ApiError(503, et.OVERLOADED, "the store server is overloaded; retry later", headers=retry)


class AdmissionMiddleware:
    """Counts requests in flight per process and per credential and sheds what ``decide`` refuses."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: AdmissionLimits,
        render: Callable[[ApiError, Scope], ASGIApp],
    ) -> None:
        self.app = app
        self.limits = limits
        self.render = render
        self.in_flight = 0
        self.held: dict[str, int] = {}
        self.waiters: deque[asyncio.Future[None]] = deque()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.limits.enabled or scope.get("path") in UNGATED_PATHS:
            await self.app(scope, receive, send)
            return
        key = credential_key(scope.get("headers", []))
        decision = decide(
            self.limits,
            in_flight=self.in_flight,
            queued=len(self.waiters),
            credential_held=self.held.get(key, 0) if key is not None else 0,
        )
        if decision in ("overload", "credential"):
            SHED.labels(decision).inc()
            await self.render(shed_error(decision, self.limits), scope)(scope, receive, send)
            return
        self._hold(key, 1)
        try:
            if decision == "queue":
                await self._wait_for_slot()
            else:
                self._take_slot()
            try:
                await self.app(scope, receive, send)
            finally:
                self._release_slot()
        finally:
            self._hold(key, -1)

    def _hold(self, key: str | None, delta: int) -> None:
        if key is None:
            return
        count = self.held.get(key, 0) + delta
        if count > 0:
            self.held[key] = count
        else:
            self.held.pop(key, None)

    def _take_slot(self) -> None:
        self.in_flight += 1
        IN_FLIGHT.inc()

    def _release_slot(self) -> None:
        """Frees a slot, or hands it straight to the longest-waiting queued request."""
        while self.waiters:
            waiter = self.waiters.popleft()
            QUEUED.dec()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: in_flight is unchanged
                return
        self.in_flight -= 1
        IN_FLIGHT.dec()

    async def _wait_for_slot(self) -> None:
        if self.in_flight < self.limits.max_in_flight:
            self._take_slot()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        QUEUED.inc()
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # it was handed a slot it will not use
            else:
                waiter.cancel()
                self.waiters.remove(waiter)
                QUEUED.dec()
            raise
