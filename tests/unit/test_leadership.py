"""Leader election's pure decisions (``controller/leadership/lease.py``) and the fence (``fence.py``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from memsync.controller.leadership import lease
from memsync.controller.leadership.fence import Fence, LeadershipLost
from memsync.controller.leadership.lease import Observation, Record, Timings

T = Timings(lease_duration=10, renew_deadline=7, retry_period=2)
NOW = datetime(2026, 12, 7, 12, 0, 0, 123456, tzinfo=UTC)


def held(holder: str | None, renewed: str = "2026-12-07T11:59:59.000000Z", transitions: int = 3) -> Record:
    return Record(
        holder=holder,
        duration_s=10,
        acquired="2026-12-07T11:00:00.000000Z",
        renewed=renewed,
        transitions=transitions,
        resource_version="41",
    )


def test_timings_must_fence_the_old_leader_before_a_new_one_may_start() -> None:
    assert T.problems() == []
    assert Timings().problems() == []
    assert Timings(10, 10, 2).problems() == ["the renew deadline must be less than the lease duration"]
    assert Timings(10, 7, 7).problems() == [
        "the retry period must be more than 0 and less than the renew deadline"
    ]


def test_a_record_is_read_from_the_lease_as_the_api_serves_it() -> None:
    obj = {
        "metadata": {"name": "memsync-operator", "resourceVersion": "41"},
        "spec": {
            "holderIdentity": "op-a_1f2e",
            "leaseDurationSeconds": 10,
            "acquireTime": "2026-12-07T11:00:00.000000Z",
            "renewTime": "2026-12-07T11:59:59.000000Z",
            "leaseTransitions": 3,
        },
    }
    assert Record.of(obj) == held("op-a_1f2e")
    assert Record.of({"metadata": {}, "spec": {"holderIdentity": "", "leaseTransitions": -1}}) == Record()


def test_a_standby_takes_an_unrenewed_lease_only_after_its_duration_on_its_own_clock() -> None:
    seen = lease.observe(None, held("op-a"), now=100.0)
    assert not lease.may_claim(seen, "op-b", 100.0, T)
    # The same claim read again keeps its first sighting: expiry counts from there, whatever renewTime says.
    seen = lease.observe(seen, held("op-a"), now=105.0)
    assert seen.since == 100.0
    assert not lease.may_claim(seen, "op-b", 109.9, T)
    assert lease.may_claim(seen, "op-b", 110.0, T)
    # A renewal starts the wait over.
    renewed = lease.observe(seen, held("op-a", renewed="2026-12-07T12:00:01.000000Z"), now=109.0)
    assert renewed.since == 109.0 and not lease.may_claim(renewed, "op-b", 110.0, T)


def test_the_holder_renews_and_a_released_lease_is_free_at_once() -> None:
    seen = Observation(held("op-a"), since=100.0)
    assert lease.may_claim(seen, "op-a", 100.0, T)
    free = Observation(held(None), since=100.0)
    assert lease.may_claim(free, "op-b", 100.0, T)


def test_a_renewal_keeps_the_acquire_time_and_a_takeover_counts_a_transition() -> None:
    renewal = lease.claim(held("op-a"), "op-a", NOW, T, namespace="memsync-system", name="memsync-operator")
    assert renewal["spec"] == {
        "holderIdentity": "op-a",
        "leaseDurationSeconds": 10,
        "acquireTime": "2026-12-07T11:00:00.000000Z",
        "renewTime": "2026-12-07T12:00:00.123456Z",
        "leaseTransitions": 3,
    }
    assert renewal["metadata"] == {
        "name": "memsync-operator",
        "namespace": "memsync-system",
        "resourceVersion": "41",  # a concurrent write of another replica makes this one fail
    }
    takeover = lease.claim(held("op-a"), "op-b", NOW, T, namespace="memsync-system", name="memsync-operator")
    assert takeover["spec"]["holderIdentity"] == "op-b"
    assert takeover["spec"]["acquireTime"] == takeover["spec"]["renewTime"] == "2026-12-07T12:00:00.123456Z"
    assert takeover["spec"]["leaseTransitions"] == 4
    first = lease.claim(None, "op-a", NOW, T, namespace="memsync-system", name="memsync-operator")
    assert first["spec"]["leaseTransitions"] == 1 and "resourceVersion" not in first["metadata"]


def test_a_release_clears_the_holder_and_keeps_the_history() -> None:
    body = lease.released(held("op-a"), namespace="ns", name="l")
    assert body["spec"]["holderIdentity"] is None
    assert body["spec"]["leaseTransitions"] == 3
    assert body["metadata"]["resourceVersion"] == "41"


class Tripped(Exception):
    pass


def tripping(reason: str) -> None:
    raise Tripped(reason)


def test_the_fence_lets_writes_through_only_until_the_renew_deadline() -> None:
    clock = [100.0]
    fence = Fence(clock=lambda: clock[0], on_trip=tripping)
    with pytest.raises(Tripped, match="a POST /api/v1/namespaces/a/pods was about to be sent"):
        fence.check("POST", "/api/v1/namespaces/a/pods")  # a standby never writes
    fence = Fence(clock=lambda: clock[0], on_trip=tripping)
    fence.extend(107.0)
    fence.check("PATCH", "/x")
    fence.check("GET", "/x")
    clock[0] = 107.0
    fence.check("GET", "/x")  # reads are never fenced
    with pytest.raises(Tripped, match="PATCH /x"):
        fence.check("PATCH", "/x")
    fence.extend(120.0)  # a renewal after the trip changes nothing: the process is leaving
    assert not fence.open and fence.tripped is not None
    with pytest.raises(Tripped):
        fence.require("poll of the work queue")


def test_a_fence_whose_trip_returns_still_refuses_the_write() -> None:
    fence = Fence(clock=lambda: 5.0, on_trip=lambda _reason: None)
    with pytest.raises(LeadershipLost):
        fence.check("DELETE", "/x")


def test_without_leader_election_the_fence_never_closes() -> None:
    fence = Fence(clock=lambda: 1e12, on_trip=tripping, elected=False)
    assert fence.valid_until == math.inf
    fence.check("POST", "/x")
    fence.require("ack")
