"""Leader election over a ``coordination.k8s.io/v1`` Lease: the pure decisions.

One Lease names the replica that acts (``holderIdentity``). The holder renews it every ``retry_period``;
a replica that cannot renew within ``renew_deadline`` stops acting (the fence, ``fence.py``), and only
after ``lease_duration`` without a renewal may another take it. ``renew_deadline < lease_duration`` is what
keeps two replicas from acting at once: the old holder has stopped for ``lease_duration - renew_deadline``
before the new one can start.

Expiry is judged on the observer's own clock, never by comparing its clock with the holder's
``renewTime`` (the machines' clocks may disagree): a standby notes when it first saw the Lease's current
record, and may take it once that record has stayed the same for ``leaseDurationSeconds``. A holder that
lets go on shutdown clears ``holderIdentity``, and a Lease without a holder may be taken at once.
Every write carries the ``resourceVersion`` that was read, so of two replicas that try at once one wins
and the other's write is refused (409).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

API_VERSION: Final = "coordination.k8s.io/v1"
KIND: Final = "Lease"


@dataclass(frozen=True)
class Timings:
    """Seconds: how long a Lease lasts unrenewed, by when its holder must have renewed it or stop acting,
    and how often every replica tries (to renew, or to take a free or expired Lease). A standby takes over
    within the duration plus two retry periods of the leader's last renewal (it counts the duration from
    when it first saw that renewal), so 10 s keeps a takeover, the new leader's start included, within
    15 s; the leader stops 3 s before anyone may take its place."""

    lease_duration: float = 10.0
    renew_deadline: float = 7.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        found = []
        if not 0 < self.retry_period < self.renew_deadline:
            found.append("the retry period must be more than 0 and less than the renew deadline")
        if not self.renew_deadline < self.lease_duration:
            found.append("the renew deadline must be less than the lease duration")
        if self.lease_duration < 1:
            found.append("the lease duration must be at least 1 second")
        return found


@dataclass(frozen=True)
class Record:
    """What a Lease says (its spec, and the resourceVersion a write must carry)."""

    holder: str | None = None
    duration_s: float | None = None
    acquired: str | None = None
    renewed: str | None = None
    transitions: int = 0
    resource_version: str | None = None

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> Record:
        spec = lease.get("spec") or {}
        meta = lease.get("metadata") or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=str(spec["holderIdentity"]) if spec.get("holderIdentity") else None,
            duration_s=float(duration) if isinstance(duration, int) and duration > 0 else None,
            acquired=spec.get("acquireTime") if isinstance(spec.get("acquireTime"), str) else None,
            renewed=spec.get("renewTime") if isinstance(spec.get("renewTime"), str) else None,
            transitions=transitions if isinstance(transitions, int) and transitions >= 0 else 0,
            resource_version=str(meta["resourceVersion"]) if meta.get("resourceVersion") else None,
        )

    def same_claim(self, other: Record) -> bool:
        """The same holder with the same renewal: nothing happened between the two reads."""
        return (self.holder, self.renewed, self.transitions) == (
            other.holder,
            other.renewed,
            other.transitions,
        )


@dataclass(frozen=True)
class Observation:
    """A Lease record and when (on this replica's monotonic clock) it was first seen as it is."""

    record: Record
    since: float


def observe(previous: Observation | None, record: Record, now: float) -> Observation:
    """The observation after reading ``record`` at ``now``: an unchanged claim keeps its first sighting."""
    if previous is not None and previous.record.same_claim(record):
        return Observation(record, previous.since)
    return Observation(record, now)


def may_claim(seen: Observation, identity: str, now: float, timings: Timings) -> bool:
    """Whether ``identity`` may write itself into the Lease now: it holds it (a renewal), nobody does, or the
    holder's claim has not changed for the Lease's duration on this replica's clock."""
    holder = seen.record.holder
    if holder is None or holder == identity:
        return True
    duration = seen.record.duration_s or timings.lease_duration
    return now - seen.since >= duration


def microtime(when: datetime) -> str:
    """A Lease time (``MicroTime``): RFC 3339 UTC with microseconds."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(
    record: Record | None, identity: str, now: datetime, timings: Timings, *, namespace: str, name: str
) -> dict[str, Any]:
    """The Lease to write for ``identity`` holding it from ``now``: a renewal keeps the acquire time and
    the count of transitions, a takeover starts a new acquire time and counts one more transition."""
    stamp = microtime(now)
    renewal = record is not None and record.holder == identity
    transitions = (record.transitions if record is not None else 0) + (0 if renewal else 1)
    spec = {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(timings.lease_duration)),
        "acquireTime": (record.acquired if renewal and record is not None else None) or stamp,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if record is not None and record.resource_version:
        meta["resourceVersion"] = record.resource_version
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def released(record: Record, *, namespace: str, name: str) -> dict[str, Any]:
    """The Lease its holder writes when it stops acting on purpose: no holder, so another replica takes it
    at once instead of waiting for it to expire."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if record.resource_version:
        meta["resourceVersion"] = record.resource_version
    spec = {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": record.acquired,
        "renewTime": record.renewed,
        "leaseTransitions": record.transitions,
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}
