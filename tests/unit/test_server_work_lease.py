"""The work item's lease rules and the scripted session's pacing, as pure functions."""

from __future__ import annotations

import pytest

from memsync.server.environments import rules as wl
from memsync.server.environments.events import check_posted, script_due, session_status

QUEUED = wl.Lease(state="queued", ttl_seconds=10)


def claimed(now: float = 100.0, first_heartbeat_s: int = 10) -> wl.Lease:
    return wl.on_ack(wl.on_poll(QUEUED, now), now, first_heartbeat_s)


def test_a_queued_item_is_pollable_until_polled_then_again_after_the_reclaim_window() -> None:
    assert wl.pollable(QUEUED, 0.0, 5000)
    polled = wl.on_poll(QUEUED, 100.0)
    assert not wl.pollable(polled, 104.9, 5000)
    assert wl.pollable(polled, 105.0, 5000)
    assert not wl.pollable(claimed(), 1000.0, 0)


def test_only_a_polled_queued_item_can_be_acknowledged() -> None:
    with pytest.raises(wl.LeaseRefused) as unpolled:
        wl.on_ack(QUEUED, 1.0, 10)
    assert unpolled.value.status == 409
    lease = claimed(100.0)
    assert (lease.state, lease.lease_expires_at) == ("starting", 110.0)
    with pytest.raises(wl.LeaseRefused):
        wl.on_ack(lease, 101.0, 10)


def test_the_first_heartbeat_window_is_its_own_and_heartbeats_then_extend_by_the_ttl() -> None:
    lease = claimed(100.0, first_heartbeat_s=3)
    assert lease.lease_expires_at == 103.0  # the window, not the 10 s TTL
    assert wl.expire(lease, 103.0).state == "queued"
    beaten, _ = wl.on_heartbeat(lease, 102.0, "t1", wl.NO_HEARTBEAT, 10)
    assert wl.expire(beaten, 111.9).state == "active"


def test_heartbeats_chain_on_the_last_value_and_extend_the_lease() -> None:
    lease, extended = wl.on_heartbeat(claimed(), 101.0, "t1", wl.NO_HEARTBEAT, 20)
    assert extended
    assert (lease.state, lease.last_heartbeat, lease.started_at, lease.lease_expires_at) == (
        "active",
        "t1",
        101.0,
        121.0,
    )
    with pytest.raises(wl.LeaseRefused) as stale:
        wl.on_heartbeat(lease, 102.0, "t2", wl.NO_HEARTBEAT, 20)
    assert stale.value.status == 412
    lease, _ = wl.on_heartbeat(lease, 102.0, "t2", "t1", 20)
    assert (lease.last_heartbeat, lease.started_at) == ("t2", 101.0)


def test_a_stopping_item_answers_heartbeats_without_extending_or_comparing() -> None:
    stopping = wl.on_stop(claimed(), 101.0, force=False)
    assert stopping.state == "stopping"
    same, extended = wl.on_heartbeat(stopping, 102.0, "t9", "anything", 20)
    assert (same, extended) == (stopping, False)


def test_expiry_requeues_a_held_item_and_ends_a_stopping_one() -> None:
    lease = claimed(100.0)
    assert wl.expire(lease, 109.9) == lease
    requeued = wl.expire(lease, 110.0)
    assert requeued == wl.Lease(state="queued", ttl_seconds=10)
    with pytest.raises(wl.LeaseRefused) as lost:
        wl.on_heartbeat(requeued, 111.0, "t", "t0", 10)
    assert lost.value.status == 412
    stopping = wl.on_stop(lease, 105.0, force=False)
    assert wl.expire(stopping, 110.0).state == "stopped"


def test_stop_forced_or_from_the_queue_ends_the_item_and_a_second_stop_is_refused() -> None:
    assert wl.on_stop(QUEUED, 1.0, force=False).state == "stopped"
    stopped = wl.on_stop(claimed(), 101.0, force=True)
    assert (stopped.state, stopped.stopped_at, stopped.lease_expires_at) == ("stopped", 101.0, None)
    graceful_first = wl.on_stop(wl.on_stop(claimed(), 101.0, force=False), 102.0, force=True)
    assert graceful_first.stop_requested_at == 101.0
    with pytest.raises(wl.LeaseRefused) as again:
        wl.on_stop(stopped, 102.0, force=True)
    assert again.value.status == 409


def test_ttl_is_clamped_to_the_servers_bounds() -> None:
    assert wl.clamp_ttl(None, 300, 2, 3600) == 300
    assert wl.clamp_ttl(1, 300, 2, 3600) == 2
    assert wl.clamp_ttl(10_000, 300, 2, 3600) == 3600


USE = {"type": "agent.tool_use", "id": "t1", "name": "write", "input": {}}
RESULT = {"type": "user.tool_result", "tool_use_id": "t1", "content": []}


def test_a_script_emits_up_to_its_next_tool_call_and_waits_for_the_result() -> None:
    script = [
        {"type": "session.status_running"},
        USE,
        {"type": "session.status_idle"},
        {"type": "session.status_terminated"},
    ]
    assert script_due([], script, 0) == 2
    assert script_due(script[:2], script, 2) == 0
    assert script_due([*script[:2], RESULT], script, 2) == 2
    assert script_due([*script, RESULT], script, 4) == 0
    custom = {"type": "agent.custom_tool_use", "id": "c1", "name": "x", "input": {}}
    assert script_due([custom], [custom, USE], 1) == 0
    assert (
        script_due(
            [custom, {"type": "user.custom_tool_result", "custom_tool_use_id": "c1"}], [custom, USE], 1
        )
        == 1
    )


def test_session_status_follows_the_status_events_and_termination_is_final() -> None:
    assert session_status([]) == "idle"
    assert session_status([{"type": "session.status_running"}]) == "running"
    ended = [{"type": "session.status_terminated"}, {"type": "session.status_idle"}]
    assert session_status(ended) == "terminated"


def test_posted_events_are_checked_and_workers_post_only_user_events() -> None:
    with pytest.raises(Exception, match="non-empty list"):
        check_posted([], agent_side=True)
    with pytest.raises(Exception, match=r"events\[1\]"):
        check_posted([RESULT, {"type": 3}], agent_side=True)
    with pytest.raises(Exception, match="user"):
        check_posted([USE], agent_side=False)
    assert check_posted([USE], agent_side=True) == [USE]
