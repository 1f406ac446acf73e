"""The operator's liveness: a probe that fails when the operator would otherwise look healthy doing nothing.

kopf's own probe answers as long as the event loop turns. Here ``/healthz`` (at ``memsync operator
--liveness URL``) fails, naming why, when:

- a watch of the API server has not been answered for ``watch_silence_s``: the API server ends every watch
  after ``WatchTimeouts.server_timeout`` (300 s) and kopf watches again at once, so a healthy watch is
  answered anew within that time (bound: 400 s); one that is not is a stuck watcher or an API server that
  no longer answers, and the operator would start no session;
- the periodic loop (re-checks and sync-health watches, ``periodic.py``) has ended, or has not completed a
  round for ``periodic_stall_s`` (it completes one every second);
- the leader election's loop has not tried to take or renew the Lease for ``elector_stall_s``.

A standby (no Lease yet) runs no watches and no periodic loop: only its elector is judged, so it stays live
and ready to take over. The decision is ``problems``, over plain values; ``Liveness`` gathers them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from memsync.controller import metrics

if TYPE_CHECKING:
    from aiohttp import TraceConfig, web

#: The query parameter that makes a list request a watch.
WATCH_PARAM: Final = "watch"


@dataclass(frozen=True)
class Bounds:
    watch_silence_s: float = 400.0
    periodic_stall_s: float = 120.0
    elector_stall_s: float = 60.0


@dataclass(frozen=True)
class Snapshot:
    """What the probe looks at, as ages in seconds (None: that part is not running here)."""

    watch_silence: dict[str, float] = field(default_factory=dict)
    periodic_age: float | None = None
    periodic_ended: str | None = None
    elector_age: float | None = None


def problems(snapshot: Snapshot, bounds: Bounds) -> list[str]:
    """Why the operator is not live (empty: it is)."""
    found = [
        f"the watch {key} has received nothing for {age:.0f} s (bound {bounds.watch_silence_s:.0f} s)"
        for key, age in sorted(snapshot.watch_silence.items())
        if age > bounds.watch_silence_s
    ]
    if snapshot.periodic_ended is not None:
        found.append(f"the periodic loop has ended: {snapshot.periodic_ended}")
    elif snapshot.periodic_age is not None and snapshot.periodic_age > bounds.periodic_stall_s:
        found.append(
            f"the periodic loop has completed no round for {snapshot.periodic_age:.0f} s "
            f"(bound {bounds.periodic_stall_s:.0f} s)"
        )
    if snapshot.elector_age is not None and snapshot.elector_age > bounds.elector_stall_s:
        found.append(
            f"the leader election has not tried the Lease for {snapshot.elector_age:.0f} s "
            f"(bound {bounds.elector_stall_s:.0f} s)"
        )
    return found


class Liveness:
    """The signals of one operator process (monotonic seconds), and the probe's HTTP handler."""

    def __init__(self, bounds: Bounds | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds or Bounds()
        self.clock = clock
        self.watches: dict[str, float] = {}  # watch (URL path) -> when it last received bytes
        self.periodic_round: float | None = None
        self.periodic_ended: Callable[[], str | None] | None = None
        self.elector_attempt: Callable[[], float] | None = None

    # --- the signals -------------------------------------------------------------------------------------

    def watch_started(self, key: str) -> None:
        """A watch request went out: a watch seen for the first time has the bound from now."""
        self.watches.setdefault(key, self.clock())

    def watch_heard(self, key: str) -> None:
        self.watches[key] = self.clock()

    def round_done(self) -> None:
        self.periodic_round = self.clock()
        metrics.LAST_PERIODIC_ROUND.set_to_current_time()

    def snapshot(self) -> Snapshot:
        now = self.clock()
        return Snapshot(
            watch_silence={key: now - at for key, at in self.watches.items()},
            periodic_age=None if self.periodic_round is None else now - self.periodic_round,
            periodic_ended=self.periodic_ended() if self.periodic_ended is not None else None,
            elector_age=None if self.elector_attempt is None else now - self.elector_attempt(),
        )

    def problems(self) -> list[str]:
        return problems(self.snapshot(), self.bounds)

    # --- kopf's HTTP session: what its watches receive -------------------------------------------------

    def trace_config(self) -> TraceConfig:
        """An aiohttp trace that tells this probe when each watch of kopf's session hears from the API."""
        from aiohttp import TraceConfig  # noqa: PLC0415 (the operator's own dependency, loaded with kopf)

        def watch_key(params: Any) -> str | None:
            url = params.url
            return url.path if url.query.get(WATCH_PARAM) in ("true", "1") else None

        async def on_start(_: Any, __: Any, params: Any) -> None:
            if (key := watch_key(params)) is not None:
                self.watch_started(key)

        async def on_answered(_: Any, __: Any, params: Any) -> None:
            if (key := watch_key(params)) is not None:
                self.watch_heard(key)

        # aiohttp reports a streamed body's chunks to no trace (kopf reads a watch line by line), so a watch
        # is heard when its answer starts: at every renewal.
        trace = TraceConfig()
        trace.on_request_start.append(on_start)
        trace.on_request_end.append(on_answered)
        return trace

    # --- the probe -------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        from aiohttp import web  # noqa: PLC0415

        found = self.problems()
        if found:
            return web.json_response({"live": False, "problems": found}, status=500)
        return web.json_response({"live": True})
