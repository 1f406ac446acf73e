"""The work-item lease handover between the operator and the session runner in the Pod.

The operator acknowledges an item and heartbeats it at once, so the lease never waits on the Pod's start.
The runner's first heartbeat (the SDK's, with ``NO_HEARTBEAT``) is then refused with 412, and the refusal
carries the lease as the server holds it (``error.details.current_state``). The runner takes over by
sending that heartbeat again with the operator's ``last_heartbeat``: a compare-and-set on the exact value the
operator holds, so either the runner now holds the lease and the operator's next heartbeat is refused, or
the operator beat in between and the runner tries again with the newer value. The runner does this only
for its first heartbeat and only for an item that is ``starting`` or ``active``; a later refusal (another
holder, a re-queued item) stays a lost lease.

The operator heartbeats more often than the runner (``operator_interval`` is below the SDK's interval of
half the TTL, at most 30 s), so the first refusal it meets carries the runner's first heartbeat: the moment
of the handover.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

NO_HEARTBEAT: Final = "NO_HEARTBEAT"
EXPECTED_PARAM: Final = "expected_last_heartbeat"
HEARTBEAT_SUFFIX: Final = "/heartbeat"
TAKEOVER_STATES: Final = ("starting", "active")
#: How often the runner may retry its first heartbeat with a newer value of the operator's.
TAKEOVER_ATTEMPTS: Final = 3
#: The TTL a holder assumes before its first heartbeat was answered (what the SDK assumes).
ASSUMED_TTL_S: Final = 90.0
OPERATOR_INTERVAL_MAX_S: Final = 15.0


@dataclass(frozen=True)
class LeaseState:
    """The lease as a 412 refusal reports it."""

    state: str | None
    last_heartbeat: str | None
    ttl_seconds: int | None


def refused_state(body: Any) -> LeaseState | None:
    """The ``error.details.current_state`` of a 412 heartbeat refusal, or None when it has none."""
    node: Any = body
    for key in ("error", "details", "current_state"):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    if not isinstance(node, Mapping):
        return None
    state, last, ttl = node.get("state"), node.get("last_heartbeat"), node.get("ttl_seconds")
    return LeaseState(
        state if isinstance(state, str) else None,
        last if isinstance(last, str) and last else None,
        ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None,
    )


def takeover_value(state: LeaseState | None) -> str | None:
    """The value a first heartbeat may take the lease over with: the holder's ``last_heartbeat`` of an item
    being served (``starting``/``active``); None when there is nothing to take over."""
    if state is None or state.state not in TAKEOVER_STATES or state.last_heartbeat in (None, NO_HEARTBEAT):
        return None
    return state.last_heartbeat


def operator_interval(ttl_s: float) -> float:
    """The operator's heartbeat interval for a lease of ``ttl_s``: a quarter of it, 1 to 15 s."""
    return max(1.0, min(ttl_s / 4, OPERATOR_INTERVAL_MAX_S))


def _instant(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def handover_gap(acknowledged_at: str | None, runner_heartbeat: str | None) -> float | None:
    """Seconds from the acknowledgement to the runner's first heartbeat, both as the server stamped them;
    None when either is not a timestamp (the heartbeat value is opaque to clients)."""
    start, end = _instant(acknowledged_at), _instant(runner_heartbeat)
    if start is None or end is None or start.tzinfo is None or end.tzinfo is None:
        return None
    return max(0.0, (end - start).total_seconds())
