"""The operator's liveness decision (``controller/liveness.py``)."""

from __future__ import annotations

from memsync.controller.liveness import Bounds, Liveness, Snapshot, problems

B = Bounds(watch_silence_s=400, periodic_stall_s=120, elector_stall_s=60)


def test_a_healthy_leader_and_a_standby_are_live() -> None:
    leader = Snapshot(
        watch_silence={"/apis/agents.memsync.dev/v1alpha2/sessionmemories": 30.0, "/api/v1/pods": 59.0},
        periodic_age=0.8,
        elector_age=1.5,
    )
    assert problems(leader, B) == []
    assert problems(Snapshot(elector_age=2.0), B) == []  # a standby: no watches, no periodic loop yet


def test_each_stall_is_named() -> None:
    snapshot = Snapshot(
        watch_silence={"/api/v1/pods": 401.0, "/api/v1/secrets": 10.0},
        periodic_age=121.0,
        elector_age=61.0,
    )
    assert problems(snapshot, B) == [
        "the watch /api/v1/pods has received nothing for 401 s (bound 400 s)",
        "the periodic loop has completed no round for 121 s (bound 120 s)",
        "the leader election has not tried the Lease for 61 s (bound 60 s)",
    ]
    ended = Snapshot(periodic_age=0.5, periodic_ended="RuntimeError: boom")
    assert problems(ended, B) == ["the periodic loop has ended: RuntimeError: boom"]


def test_signals_are_ages_on_the_probes_clock() -> None:
    clock = [1000.0]
    live = Liveness(B, clock=lambda: clock[0])
    live.watch_started("/api/v1/pods")
    clock[0] = 1300.0
    live.watch_started("/api/v1/pods")  # a new request of a known watch does not reset its silence
    clock[0] = 1401.0
    assert live.problems() == ["the watch /api/v1/pods has received nothing for 401 s (bound 400 s)"]
    live.watch_heard("/api/v1/pods")
    live.round_done()
    assert live.problems() == []
    ended = "cancelled"
    live.periodic_ended = lambda: ended
    assert live.problems() == ["the periodic loop has ended: cancelled"]
