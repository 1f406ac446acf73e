"""Shedding by the event loop's lag: a request the process cannot start in time is answered 503 at once.

The admission gate (``admission``) counts requests that hold a slot while they wait for a thread or the
database. A request answered on the event loop itself (the sidecars' probe from memory, ``/healthz``) holds
no slot for longer than the loop's own turn, so no count of slots sees a crowd of them: when more arrive than
the process can answer, the excess waits unread in the kernel's socket buffers and every answer comes later.

The loop's lag does see it. ``LoopLag`` keeps a timer due every ``TICK_S``; while the loop is busy past
that due time it is late, and a request read then has work queued ahead of it. Lateness is counted only in
the proportion the event loop's own thread was using the CPU meanwhile (its CPU time over the wall time since
the timer last ran): a loop kept waiting by worker threads that hold the interpreter (work the admission gate
already bounds), or by a machine that did not run the process for a moment (a busy node, CPU throttling), is
late without its own work being the cause, and refusing then would only add errors to a delay.

A request that arrives while the loop is more than ``max_lag_s`` late so counted is answered 503
(``overloaded_error``, ``Retry-After``) by the HTTP protocol itself (``protocol``), before an ASGI task,
middleware or route exists for it. It has to be that cheap: offered twice what it can serve, a process keeps
up only if a refusal costs less than half of the cheapest request it serves, and the sidecars' probe costs
about twice the bare minimum of an ASGI request. ``/healthz``, ``/readyz`` and ``/metrics`` are never refused.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterable
from typing import ClassVar, Final

import orjson
from prometheus_client import Gauge

from memsync.server.http.admission import UNGATED_PATHS, AdmissionLimits, shed_error
from memsync.server.http.envelope import new_request_id

#: How often the loop's timer is due: 50 wake-ups a second when idle, a few microseconds each.
TICK_S: Final = 0.02
#: The default bound (``--max-loop-lag``): a request read later than this behind the loop is refused.
DEFAULT_MAX_LAG_S: Final = 0.05
LAG_REASON: Final = "lag"  # the label of memsync_store_requests_shed_total
_LIMITS: Final = AdmissionLimits()  # the admission gate's defaults: its Retry-After

LAG = Gauge(
    "memsync_store_event_loop_lag_seconds",
    "How late the server process's event loop ran its last timer (the largest over the processes)",
    multiprocess_mode="livemax",
)


class LoopLag:
    """How far behind one event loop is running, read with one clock call."""

    _of: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag]] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop, tick_s: float = TICK_S) -> None:
        self.loop = loop
        self.tick_s = tick_s
        self._ticked, self._cpu = time.monotonic(), time.thread_time()  # created on the loop's thread
        self._due = self._ticked + tick_s
        loop.call_later(tick_s, self._tick)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> LoopLag:
        """The loop's monitor, started on first use."""
        found = cls._of.get(loop)
        if found is None:
            found = cls._of[loop] = cls(loop)
        return found

    def _tick(self) -> None:
        now = time.monotonic()
        LAG.set(max(0.0, now - self._due))
        self._ticked, self._cpu = now, time.thread_time()
        self._due = now + self.tick_s
        self.loop.call_later(self.tick_s, self._tick)

    def behind(self) -> float:
        """Seconds the loop is past its timer's due time now, in the proportion its thread was busy since
        the timer last ran (negative while it is on time; the thread's CPU clock is read only when it is
        late). Called on the loop's thread."""
        now = time.monotonic()
        late = now - self._due
        if late <= 0:
            return late
        busy = (time.thread_time() - self._cpu) / (now - self._ticked)
        return late * min(1.0, busy)


def refuses(path: str, behind_s: float, max_lag_s: float) -> bool:
    """Whether a request for ``path`` read while the loop is ``behind_s`` late is answered 503 at once."""
    return 0 < max_lag_s < behind_s and path not in UNGATED_PATHS


def refusal(default_headers: Iterable[tuple[bytes, bytes]], *, keep_alive: bool) -> bytes:
    """The whole HTTP/1.1 503 answer, in the API's error envelope with a request id, as bytes to write."""
    request_id = new_request_id()
    err = shed_error("overload", _LIMITS)
    body = orjson.dumps(err.body(request_id))
    head = [
        b"HTTP/1.1 503 Service Unavailable\r\n",
        *(name + b": " + value + b"\r\n" for name, value in default_headers),
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        *(
            name.encode("ascii") + b": " + value.encode("ascii") + b"\r\n"
            for name, value in err.headers.items()
        ),
        b"request-id: " + request_id.encode("ascii") + b"\r\n",
        b"" if keep_alive else b"connection: close\r\n",
        b"\r\n",
    ]
    return b"".join(head) + body
