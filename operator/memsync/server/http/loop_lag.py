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
late without its own work being the cause, and refusing then would only add errors to a delay. And the loop
must have been busy for at least half of the last second (``SUSTAINED_S``, ``SUSTAINED_SHARE``): one long
moment (a first request that initialises something, a garbage collection) makes it late once, which is no
overload.

The timer's lateness undercounts how long a request waited unread, though. The loop works in turns: it polls
for every connection with something to read, reads them all, then runs the tasks that started; the timer
runs between two turns, late only by what the turn had left when it fell due. What a turn reads arrived
after the loop last polled: if the loop went from the previous turn to this one without waiting for I/O,
that was just after the previous turn's first read, and it has waited for everything the loop did since
(``waited_s``: the loop thread's CPU time from the previous turn's first read to this one's, when it was on
the CPU for ``BUSY_THROUGH`` of that time, and the time since this one's first read). A request is judged
by the larger of the two.

Lateness alone also comes too late: the requests the loop reads in one turn are all started before any of
them runs, so a turn that reads four hundred probes would start them all and only then run late. So the
lateness a request is judged by also counts the work queued ahead of it: the requests started in the same
turn of the loop, none of which has run yet (``queued``), times the loop's measured time per request
(``cost_s``, smoothed over the timer's ticks). Requests started in earlier turns and now waiting for a
thread or the database are not counted: their wait costs the loop nothing, and what they still do on it
shows in its lateness when they do it. The time the loop spends writing refusals is not counted in
``cost_s`` either (a refusal costs a fraction of a request; counted as requests' time, a crowd of refusals
would make every request look dearer and refuse more of them still).

A request that arrives while the loop is more than ``max_lag_s`` late so counted is answered 503
(``overloaded_error``, ``Retry-After``) by the HTTP protocol itself (``protocol``), before an ASGI task,
middleware or route exists for it. It has to be that cheap: offered twice what it can serve, a process keeps
up only if a refusal costs less than half of the cheapest request it serves, and the sidecars' probe costs
about twice the bare minimum of an ASGI request. ``/healthz``, ``/readyz`` and ``/metrics`` are never refused.
Cheaper still: a whole bodiless ``GET`` (the probe, as it arrives) on a connection with nothing else in
progress is judged before it is parsed (``unparsed_path``), and refused without ever becoming a request.

While an overload stands (``Standing``: every tick late, or every turn long, for a while, not one long
moment), requests are judged against a tenth of ``max_lag_s``: a request waits to be read about as long as
the loop runs behind, refused or not, so the bound on a crowd that never drains is what its refusals take.
The load is then sustained by definition (the busy share is not asked). And it stands until the loop has been
on time *with nothing refused* for longer than a refused client waits: refusing is what keeps the loop on
time, and ending the overload at the first tick on time let the queue grow back to ``max_lag_s`` whenever
the clients refused came back, so their next refusals waited that long (measured, clients honouring
``Retry-After`` at twice the probe's rate: refusals p50 41-62 ms; with this and ``waited_s``, 4-7 ms).

Refusing never takes the loop longer than serving: since the last tick, the time spent refusing may not
exceed the time spent on requests answered at hand and started (``cost_s`` each). A crowd that ignores
``Retry-After`` keeps every turn full of refusals, so everything read waited a turn and is past the bound:
without that share, the process refused nearly everything it read and served almost nothing (measured
once: 4 % of what was sent admitted, against 22-33 % with it).

A connection refused that way is not read again until the next tick (``hold``). A client that ignores
``Retry-After`` and sends again at once would otherwise keep the loop reading and refusing: uvloop polls
again without running timers or tasks while a poll returns its limit of 1,024 ready connections, so with
more connections than that busy, the requests already admitted and the timer itself waited seconds, the
loop looked ever later, and everything read was refused (measured with 2,000 connections: 1 % admitted).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import ClassVar, Final

import orjson
from prometheus_client import Gauge

from memsync.server.http.admission import (
    DEFAULT_RETRY_AFTER_S,
    SHED,
    UNGATED_PATHS,
    AdmissionLimits,
    shed_error,
)
from memsync.server.http.envelope import header_lines, new_request_id

#: How often the loop's timer is due: 50 wake-ups a second when idle, a few microseconds each.
TICK_S: Final = 0.02
#: The default bound (``--max-loop-lag``): a request read later than this behind the loop is refused.
DEFAULT_MAX_LAG_S: Final = 0.05
LAG_REASON: Final = "lag"  # the label of memsync_store_requests_shed_total
#: Refusals need the loop's thread busy for at least this share of the last ``SUSTAINED_S`` seconds.
SUSTAINED_S: Final = 1.0
SUSTAINED_SHARE: Final = 0.5
#: How stale the loop thread's CPU time may be when a request is judged (a few per cent of a tick).
CPU_READ_S: Final = 0.001
#: Requests started between two ticks before their cost is taken as a sample.
MIN_SAMPLE: Final = 5
#: A standing overload: every tick for this long later than half the bound (``Standing``).
STANDING_S: Final = 0.1
#: ... and it has ended when every tick has been within its tighter bound, with nothing refused, for this
#: long: longer than a refused client waits (its ``Retry-After`` and up to half again), so the clients it
#: refused come back to the same bound, not to a loop that lets a queue grow to ``max_lag_s`` again.
STANDING_EXIT_S: Final = 2.0 * DEFAULT_RETRY_AFTER_S
#: Between two turns' first reads the loop's thread was on the CPU for at least this share of the time: it
#: went from one turn to the next without waiting for I/O (a machine that runs it less, a CPU limit that
#: throttles it, reads as waiting: the loop is then judged by its timer alone, as before it was busy).
BUSY_THROUGH: Final = 0.75
#: The bound while an overload stands, as a share of ``max_lag_s``.
STANDING_BOUND_SHARE: Final = 0.1
#: While refusals go on, one WARNING line this often (with how many were refused since the last).
REPORT_EVERY_S: Final = 10.0
_LIMITS: Final = AdmissionLimits()  # the admission gate's defaults: its Retry-After

logger = logging.getLogger("memsync.server")

LAG = Gauge(
    "memsync_store_event_loop_lag_seconds",
    "How late the server process's event loop ran its last timer (the largest over the processes)",
    multiprocess_mode="livemax",
)
STANDING = Gauge(
    "memsync_store_overload_standing",
    "1 while an overload stands in a server process (requests refused past a tenth of the lag bound), else 0",
    multiprocess_mode="livemax",
)


class LoopLag:
    """How far behind one event loop is running, read with one clock call."""

    _of: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLag]] = weakref.WeakKeyDictionary()

    def __init__(
        self, loop: asyncio.AbstractEventLoop, max_lag_s: float = DEFAULT_MAX_LAG_S, tick_s: float = TICK_S
    ) -> None:
        self.loop = loop
        self.max_lag_s = max_lag_s
        self.tick_s = tick_s
        self._refused, self._reported = 0, float("-inf")
        now = time.monotonic()
        self._due = now + tick_s
        # (time, the loop thread's CPU time) at each tick, the last one first read here, on the loop's thread
        self._cpu_at, self._cpu = now, time.thread_time()  # the thread's CPU clock, last read at _cpu_at
        self._window: deque[tuple[float, float]] = deque([(now, self._cpu)])
        self._shed = SHED.labels(LAG_REASON)  # here, not at import: a worker's metrics go to its own files
        self.started = 0  # requests started since the last tick
        self.queued = 0  # requests started in this turn of the loop, none run yet
        self._turn_marked = False
        # this turn's first read (time, the loop thread's CPU time then), and the loop's CPU time from the
        # previous turn's first read to it when the loop did not wait for I/O in between (else 0)
        self._turn_at, self._turn_cpu, self._before_s = now, self._cpu, 0.0
        self._longest_s = 0.0  # the longest such time since the last tick
        self._answered_s = 0.0  # time spent answering requests at hand since the last tick
        self._refusing_s = 0.0  # time spent refusing since the last tick
        self.cost_s = 0.0  # the loop's CPU per request started, smoothed over ticks
        self._held: list[Callable[[], None]] = []  # connections refused since the last tick, not read since
        self.standing = Standing(max_lag_s)
        loop.call_later(tick_s, self._tick)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, max_lag_s: float) -> LoopLag:
        """The loop's monitor, started on first use."""
        found = cls._of.get(loop)
        if found is None:
            found = cls._of[loop] = cls(loop, max_lag_s)
        return found

    def start(self) -> None:
        """Count a request started (its task created, to run in the loop's next turn)."""
        self.started += 1
        self.queued += 1
        self.read()

    def read(self) -> None:
        """Note that the HTTP protocol is reading from a connection: its first read in a turn of the loop
        begins the turn."""
        if not self._turn_marked:
            self._begin_turn()

    def _begin_turn(self) -> None:
        self._turn_marked = True
        now = time.monotonic()
        cpu = self.cpu(now)
        used = cpu - self._turn_cpu
        # what is read in this turn arrived after the loop last polled for it: if it went from the previous
        # turn to this one without waiting for I/O, that was just after the previous turn's reads, and it has
        # waited for all the loop did since; if the loop waited, it arrived while it waited (or woke it)
        self._before_s = used if used >= BUSY_THROUGH * (now - self._turn_at) else 0.0
        self._longest_s = max(self._longest_s, self._before_s)
        self._turn_at, self._turn_cpu = now, cpu
        # runs after every callback of this turn and before the tasks it created: the next turn's start
        self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self.queued, self._turn_marked = 0, False

    def waited_s(self) -> float:
        """How long a request read now may have waited unread: the loop's time since this turn's first read,
        and the time it spent from the previous turn's to that one when it did not wait for I/O between."""
        return self._before_s + (time.monotonic() - self._turn_at)

    def ahead_s(self) -> float:
        """The loop time the requests queued in this turn will take before one started now can run."""
        return self.queued * self.cost_s

    def judge(self) -> float:
        """How late a request read now would start: how long it may have waited unread (or the loop's
        lateness, when that is more), and the requests queued ahead of it in this turn."""
        return max(0.0, self.behind(), self.waited_s()) + self.ahead_s()

    def refuses(self, path: str, behind_s: float) -> bool:
        """Whether a request for ``path`` judged ``behind_s`` late (``judge``) is answered 503 at once: the
        module's ``refuses`` over this loop's bound, load and time spent refusing and serving."""
        return refuses(
            path,
            behind_s,
            self.bound(),
            sustained=self.standing.on or self.busy_share() >= SUSTAINED_SHARE,
            refusing_s=self._refusing_s,
            serving_s=self._answered_s + self.started * self.cost_s,
        )

    def hold(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` at the next tick: a connection just refused is not read again until then."""
        self._held.append(resume)

    def _tick(self) -> None:
        held, self._held = self._held, []
        for resume in held:
            resume()
        now, cpu = time.monotonic(), time.thread_time()
        self._cpu_at, self._cpu = now, cpu
        late = now - self._due
        LAG.set(max(0.0, late))
        spent, busy = self._since_tick(now, cpu)
        # late as behind() judges a request (in the proportion the loop's thread was busy: not a loop kept
        # waiting by worker threads or by a machine that did not run it), or as long as its longest turn
        if self.standing.tick(now, max(late * busy, self._longest_s), refused=self._refusing_s > 0):
            STANDING.set(1 if self.standing.on else 0)
        if self.started >= MIN_SAMPLE:
            sample = max(0.0, spent - self._answered_s - self._refusing_s) / self.started
            self.cost_s = sample if self.cost_s == 0.0 else 0.8 * self.cost_s + 0.2 * sample
        self.started, self._answered_s, self._refusing_s, self._longest_s = 0, 0.0, 0.0, 0.0
        self._window.append((now, cpu))
        while len(self._window) > 2 and self._window[1][0] <= now - SUSTAINED_S:
            self._window.popleft()  # the oldest kept is the last one at least SUSTAINED_S old
        self._due = now + self.tick_s
        self.loop.call_later(self.tick_s, self._tick)

    def bound(self) -> float:
        """The lateness past which a request is refused now: ``max_lag_s``, a tenth of it while an overload
        stands."""
        return self.standing.bound

    def answered(self, spent_s: float) -> None:
        """Count a request the HTTP protocol answered itself, in ``spent_s``: its time is not a started
        request's (it ran at once), so, as a refusal's, it is left out of ``cost_s``."""
        self._answered_s += spent_s

    def refused(self, behind_s: float, spent_s: float) -> None:
        """Count a refusal that took the loop ``spent_s``; say so in the log at most once per
        ``REPORT_EVERY_S`` while refusals go on."""
        self._refusing_s += spent_s
        self._shed.inc()
        self._refused += 1
        now = time.monotonic()
        if now - self._reported >= REPORT_EVERY_S:
            logger.warning(
                "refusing requests: the event loop is busy and late (503, Retry-After)",
                extra={
                    "behind_s": round(behind_s, 3),
                    "refused": self._refused,
                    "max_loop_lag_s": self.max_lag_s,
                    "bound_s": round(self.bound(), 4),  # a tenth of it while the overload stands
                },
            )
            self._reported, self._refused = now, 0

    def cpu(self, now: float) -> float:
        """The loop thread's CPU time, read again only when the last reading is ``CPU_READ_S`` old: reading it
        is a system call (the wall clock is not), and once per request under a crowd it was a sixth of the
        process's time. Called on the loop's thread."""
        if now - self._cpu_at >= CPU_READ_S:
            self._cpu_at, self._cpu = now, time.thread_time()
        return self._cpu

    def busy_share(self) -> float:
        """The share of the last ``SUSTAINED_S`` seconds (from the newest tick at least that old) the loop's
        thread spent on the CPU, 0 to 1; 0 while the loop has been watched for less than that (a process
        that has just started is busy setting up, which is no sustained load). Called on the loop's thread."""
        now = time.monotonic()
        since: tuple[float, float] | None = None
        for tick in self._window:  # oldest first: the trimmed window holds one or two ticks that old
            if tick[0] > now - SUSTAINED_S:
                break
            since = tick
        if since is None:
            return 0.0
        at, used = since
        return min(1.0, (self.cpu(now) - used) / (now - at))

    def behind(self) -> float:
        """Seconds the loop is past its timer's due time now, in the proportion its thread was busy since
        the timer last ran (negative while it is on time; the thread's CPU clock is read only when it is
        late). Called on the loop's thread."""
        now = time.monotonic()
        late = now - self._due
        if late <= 0:
            return late
        return late * self._since_tick(now, self.cpu(now))[1]

    def _since_tick(self, now: float, cpu: float) -> tuple[float, float]:
        """The loop thread's CPU time since the last tick (``cpu``: its CPU clock at ``now``), and the share
        of the wall time since then that it is, at most 1."""
        ticked, used = self._window[-1]
        spent = cpu - used
        return spent, min(1.0, spent / (now - ticked)) if now > ticked else 1.0


class Standing:
    """Whether the loop's lateness is a burst or a standing overload, from the lateness of its ticks.

    A burst (a crowd of sidecars restarted together, many connections sending at once) makes the loop late
    for a moment and drains: its requests are served within ``max_lag_s``. An overload that stands (more
    arriving, all the time, than the process can serve) keeps every tick late: then every request waits
    about ``max_lag_s`` to be read, the refused as long as the served, since the loop reads them in turn. So
    once every tick has run more than half of ``max_lag_s`` late for ``STANDING_S``, requests are judged
    against a tenth of it (``bound``), which keeps the loop's turns, and so every answer's wait, short;
    when every tick has run within that tenth, with nothing refused, for ``STANDING_EXIT_S``, the bound is
    ``max_lag_s`` again (ticks on time while refusing are the overload shed, not gone). (The queue that does
    not drain within an interval is the one to bound tightly: the idea of CoDel, the queue discipline of
    Nichols and Jacobson.) A pure state over the ticks' times, lateness and refusals."""

    def __init__(self, max_lag_s: float) -> None:
        self.max_lag_s = max_lag_s
        self.on = False
        # since when every tick has run past the threshold that would change the state
        self._since: float | None = None

    @property
    def bound(self) -> float:
        return self.max_lag_s * STANDING_BOUND_SHARE if self.on else self.max_lag_s

    def tick(self, now: float, late_s: float, *, refused: bool = False) -> bool:
        """Follow one tick, run at ``now`` ``late_s`` past its due time, ``refused``: requests were refused
        since the last; True when the state changed."""
        if self.on:
            crossed = late_s <= self.max_lag_s * STANDING_BOUND_SHARE and not refused
        else:
            crossed = late_s > self.max_lag_s / 2
        if not crossed:
            self._since = None
        elif self._since is None:  # counted from this tick: one long moment (a stall) is no overload
            self._since = now
        if self._since is None or now - self._since < (STANDING_EXIT_S if self.on else STANDING_S):
            return False
        self.on, self._since = not self.on, None
        return True


def refuses(
    path: str, behind_s: float, bound_s: float, *, sustained: bool, refusing_s: float, serving_s: float
) -> bool:
    """Whether a request for ``path``, read while the loop would start it ``behind_s`` late, is answered
    503 at once: past ``bound_s`` (0: never), under a ``sustained`` load, and while the refusals since the
    loop's last tick have taken it no more time (``refusing_s``) than the requests it served
    (``serving_s``)."""
    return 0 < bound_s < behind_s and sustained and refusing_s <= serving_s and path not in UNGATED_PATHS


def unparsed_path(data: bytes) -> str | None:
    """The path of the request in ``data`` when ``data`` is exactly one whole HTTP/1.1 ``GET`` without a body
    that keeps its connection (a sidecar's probe, as it arrives: in one read), so that it can be refused
    without being parsed; None for anything else, which is parsed and judged the ordinary way."""
    if not data.startswith(b"GET /") or data.find(b"\r\n\r\n") != len(data) - 4:
        return None
    line_end = data.find(b"\r\n")
    line = data[:line_end]
    if not line.endswith(b" HTTP/1.1"):
        return None
    fields = data[line_end:].lower()
    if _NOT_AT_ONCE.search(fields):
        return None
    at = fields.find(b"\r\nconnection:")
    if at >= 0 and fields.find(b"keep-alive", at, fields.find(b"\r\n", at + 2)) < 0:
        return None  # close or upgrade: the ordinary way
    path = line[4:-9].split(b"?", 1)[0]
    if b"%" in path or b" " in path:
        return None
    return path.decode("ascii", "replace")


#: Header fields that make a request anything but a bare GET: a body, 100-continue, a protocol upgrade.
_NOT_AT_ONCE: Final = re.compile(rb"\r\n(?:content-length|transfer-encoding|expect|upgrade):")


def refusal(default_headers: Iterable[tuple[bytes, bytes]], *, keep_alive: bool) -> bytes:
    """The whole HTTP/1.1 503 answer, in the API's error envelope with a request id of its own, as bytes to
    write: the answer around its request id is built once per ``default_headers`` (uvicorn makes a new list
    each second, for its date) and kept, so a refusal costs a request id and a join."""
    kept = _REFUSALS.get(keep_alive)
    if kept is None or kept[0] is not default_headers:
        kept = _REFUSALS[keep_alive] = (
            default_headers,
            _refusal_parts(default_headers, keep_alive=keep_alive),
        )
    return new_request_id().encode("ascii").join(kept[1])


#: keep_alive -> (the default headers it was built with, the answer's bytes split at its request id)
_REFUSALS: dict[bool, tuple[Iterable[tuple[bytes, bytes]], list[bytes]]] = {}
_PLACEHOLDER_ID: Final = "req_" + "_" * 24  # a request id's length, and no text an answer holds otherwise


def _refusal_parts(default_headers: Iterable[tuple[bytes, bytes]], *, keep_alive: bool) -> list[bytes]:
    err = shed_error("overload", _LIMITS)
    body = orjson.dumps(err.body(_PLACEHOLDER_ID))
    head = [
        b"HTTP/1.1 503 Service Unavailable\r\n",
        header_lines(default_headers),
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        header_lines((name.encode("ascii"), value.encode("ascii")) for name, value in err.headers.items()),
        b"request-id: " + _PLACEHOLDER_ID.encode("ascii") + b"\r\n",
        b"" if keep_alive else b"connection: close\r\n",
        b"\r\n",
    ]
    parts = (b"".join(head) + body).split(_PLACEHOLDER_ID.encode("ascii"))
    assert len(parts) == 3, "the request id is in the header and the body, once each"
    return parts
