"""The work item's state machine and lease, as pure functions over plain data (no I/O, no clock reads).

States: ``queued`` (waiting; handed out by a poll, handed out again when the poll was not acknowledged within
the reclaim window) → ``starting`` (acknowledged; the first-heartbeat window runs from the acknowledgement)
→ ``active`` (a heartbeat arrived; from then on each heartbeat extends the lease by its TTL) → ``stopping``
(a graceful stop was asked for) → ``stopped``. A lease that runs out before the item stops puts a
``starting``/``active`` item back in the queue (another worker may claim it; the old holder's next heartbeat
is refused with 412), and ends a ``stopping`` item.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

WorkState = Literal["queued", "starting", "active", "stopping", "stopped"]
HELD_STATES: tuple[WorkState, ...] = ("starting", "active", "stopping")
NO_HEARTBEAT = "NO_HEARTBEAT"
DEFAULT_RECLAIM_MS = 5000
DEFAULT_FIRST_HEARTBEAT_S = 90
BLOCK_MS_MAX = 999


@dataclass(frozen=True)
class Lease:
    """What the server keeps about one work item's claim. Times are epoch seconds."""

    state: WorkState
    ttl_seconds: int
    polled_at: float | None = None
    acknowledged_at: float | None = None
    started_at: float | None = None
    last_heartbeat: str | None = None  # the RFC 3339 value a heartbeat must echo
    latest_heartbeat_at: float | None = None
    lease_expires_at: float | None = None
    stop_requested_at: float | None = None
    stopped_at: float | None = None


class LeaseRefused(Exception):
    """The request does not fit the item's state; ``status`` is the HTTP answer (409 or 412)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def pollable(lease: Lease, now: float, reclaim_ms: int) -> bool:
    """A queued item nobody polled, or whose poll was not acknowledged within ``reclaim_ms``."""
    if lease.state != "queued":
        return False
    return lease.polled_at is None or (now - lease.polled_at) * 1000 >= reclaim_ms


def expire(lease: Lease, now: float) -> Lease:
    """The lease after its deadline: re-queued when it was held for running, stopped when it was stopping."""
    if lease.state not in HELD_STATES or lease.lease_expires_at is None or now < lease.lease_expires_at:
        return lease
    if lease.state == "stopping":
        return replace(lease, state="stopped", stopped_at=now, lease_expires_at=None)
    return Lease(state="queued", ttl_seconds=lease.ttl_seconds)


def on_poll(lease: Lease, now: float) -> Lease:
    return replace(lease, polled_at=now)


def on_ack(lease: Lease, now: float, first_heartbeat_s: int) -> Lease:
    """The claim: ``starting``, with ``first_heartbeat_s`` for the first heartbeat to arrive."""
    if lease.state != "queued" or lease.polled_at is None:
        raise LeaseRefused(
            409, f"only a polled, queued work item can be acknowledged; this one is {lease.state}"
        )
    return replace(lease, state="starting", acknowledged_at=now, lease_expires_at=now + first_heartbeat_s)


def on_heartbeat(
    lease: Lease, now: float, stamp: str, expected: str | None, ttl_seconds: int
) -> tuple[Lease, bool]:
    """The lease after a heartbeat and whether it was extended. ``stamp`` is the new ``last_heartbeat`` (it
    must differ from the stored one). Stopping and stopped items are not compared and not extended."""
    if lease.state in ("stopping", "stopped"):
        return lease, False
    stored = lease.last_heartbeat or NO_HEARTBEAT
    if lease.state == "queued":
        raise LeaseRefused(412, "the work item is queued again: its lease ran out and it awaits a new claim")
    if expected is not None and expected != stored:
        raise LeaseRefused(
            412,
            "expected_last_heartbeat does not match the stored heartbeat: another worker may hold the lease",
        )
    extended = replace(
        lease,
        state="active",
        started_at=lease.started_at if lease.started_at is not None else now,
        last_heartbeat=stamp,
        latest_heartbeat_at=now,
        ttl_seconds=ttl_seconds,
        lease_expires_at=now + ttl_seconds,
    )
    return extended, True


def on_stop(lease: Lease, now: float, force: bool) -> Lease:
    if lease.state == "stopped":
        raise LeaseRefused(409, "the work item is already stopped")
    requested = lease.stop_requested_at if lease.stop_requested_at is not None else now
    if force or lease.state == "queued":
        return replace(
            lease, state="stopped", stop_requested_at=requested, stopped_at=now, lease_expires_at=None
        )
    return replace(lease, state="stopping", stop_requested_at=requested)


def clamp_ttl(desired: int | None, default: int, minimum: int, maximum: int) -> int:
    if desired is None:
        return default
    return max(minimum, min(maximum, desired))
