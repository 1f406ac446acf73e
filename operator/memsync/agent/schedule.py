"""When the sidecar syncs a store next (docs/sync-agent.md#early-sync): pure decisions over plain numbers.

Every store has a periodic pass (the backstop: every interval, with jitter) and, with early sync on, an
early pass once a change seen in its folder has settled: a burst of writes is one pass, and no store syncs
more often than once per ``MIN_GAP_S``. Times are seconds on one monotonic clock.

A change seen while the store's own pass runs counts once the pass ends, unless that pass wrote into the
folder (pulls, local removals, conflict copies): then it, and any change seen just after, may be the pass's
own write and is not counted, so a pull never sets off another pass. A user's edit made at that moment is not
lost: the periodic pass takes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MIN_GAP_S = 5.0  # at most one pass per store in this many seconds, early or not
SETTLE_S = 0.5  # a change starts a pass once the folder has been quiet this long
OWN_WRITES_S = 1.0  # after a pass that wrote into the folder, changes seen this long are its own
JITTER = 0.1  # a periodic wait is interval * (1 +/- 10 %), so many Pods do not sync in step


def periodic_due(started: float, ended: float, interval: float, *, first: bool, draw: float) -> float:
    """When a store's next periodic pass is due, ``draw`` in [0, 1) being random.

    After the first pass (which runs at once: readiness waits for it) the next comes 0.5 to 1.5 intervals
    after it ends, uniformly: sidecars started together (a node drained, a store server restarted) fall into
    phases spread over a whole interval instead of marching in step, and none syncs much sooner than its
    interval. After every other pass it is the interval +/- 10 %, counted from the pass's start.
    """
    if first:
        return ended + interval * (0.5 + draw)
    return started + interval * (1 - JITTER + 2 * JITTER * draw)


@dataclass(frozen=True)
class Timing:
    """The settings of the schedule; ``early`` off leaves the periodic pass alone."""

    early: bool = True
    settle: float = SETTLE_S
    min_gap: float = MIN_GAP_S
    own_writes: float = OWN_WRITES_S


@dataclass(frozen=True)
class StoreClock:
    """One store's times: when its last pass started and ended, when its periodic pass is due, and the
    last change seen in its folder that no pass has taken yet (``None``: none)."""

    periodic_due: float
    last_start: float | None = None
    last_end: float | None = None
    wrote: bool = False  # the last pass wrote into the folder
    running: bool = False
    changed_at: float | None = None
    seen_during: float | None = None  # the last change seen while the pass ran


def next_pass_at(clock: StoreClock, timing: Timing) -> float:
    """When the store's next pass should start: the periodic pass, or earlier for a settled change (never
    sooner than ``min_gap`` after the last pass started)."""
    if not timing.early or clock.changed_at is None:
        return clock.periodic_due
    early = clock.changed_at + timing.settle
    if clock.last_start is not None:
        early = max(early, clock.last_start + timing.min_gap)
    return min(early, clock.periodic_due)


def counts_as_change(clock: StoreClock, seen_at: float, timing: Timing) -> bool:
    """Whether a change seen at ``seen_at`` asks for an early pass, or may be the store's own write."""
    if not timing.early or clock.running:
        return False
    return not (clock.wrote and clock.last_end is not None and seen_at < clock.last_end + timing.own_writes)


def seen(clock: StoreClock, seen_at: float, timing: Timing) -> StoreClock:
    """``clock`` after a change seen in the folder at ``seen_at``."""
    if timing.early and clock.running:
        return replace(clock, seen_during=seen_at)
    if not counts_as_change(clock, seen_at, timing):
        return clock
    return replace(clock, changed_at=seen_at)


def started(clock: StoreClock, at: float) -> StoreClock:
    """``clock`` once a pass starts at ``at``: it takes every change seen so far."""
    return replace(clock, last_start=at, running=True, changed_at=None, seen_during=None)


def ended(clock: StoreClock, at: float, *, wrote: bool, periodic_due: float) -> StoreClock:
    """``clock`` once its pass ended at ``at``; ``periodic_due`` is when the backstop comes next. A change
    seen while it ran counts unless the pass wrote into the folder (then it may be the pass's own)."""
    changed = None if wrote else clock.seen_during
    return replace(
        clock,
        last_end=at,
        running=False,
        wrote=wrote,
        periodic_due=periodic_due,
        changed_at=changed,
        seen_during=None,
    )
