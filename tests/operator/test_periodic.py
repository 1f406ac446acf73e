"""The operator's periodic jobs: which SessionMemories ask for which job, and when each run is due."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from memsync.controller import periodic as pj
from memsync.controller.sessionmemory import phases as ph

REF = ("ns", "s1", "u1")
OTHER = ("ns", "s2", "u2")


def body(status: dict[str, Any], *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "s1", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


def test_the_jobs_follow_the_status() -> None:
    refused = {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "reason": "SecretNotFound"}],
    }
    assert pj.jobs_of(body({})) is None  # nothing created yet: the create handler owns it
    assert pj.jobs_of(body(refused)) == {pj.RECHECK: REF}
    assert pj.jobs_of(body({"phase": "Pending", "podName": "p"})) == {pj.RECHECK: REF}
    assert pj.jobs_of(body({"phase": "Running", "podName": "p"})) == {pj.RECHECK: REF, pj.HEALTH: REF}
    for phase in ph.TERMINAL_PHASES:
        assert pj.jobs_of(body({"phase": phase, "podName": "p"})) is None, phase
    assert pj.jobs_of(body({"phase": "Running", "podName": "p"}, deleting=True)) is None


def test_a_schedule_runs_each_wanted_object_once_per_interval() -> None:
    schedule = pj.Schedule(interval=30.0, first_delay=30.0)
    assert schedule.take([REF], now=0.0) == []  # first due one interval after it is wanted
    assert schedule.take([REF, OTHER], now=29.0) == []
    assert schedule.take([REF, OTHER], now=30.0) == [REF]
    assert schedule.take([REF, OTHER], now=45.0) == []
    assert schedule.take([REF, OTHER], now=59.0, busy=frozenset({OTHER, REF})) == []  # still running
    assert sorted(schedule.take([REF, OTHER], now=60.0)) == [REF, OTHER]
    assert schedule.take([OTHER], now=200.0) == [OTHER]  # REF no longer wanted: dropped
    assert REF not in schedule.due
    assert schedule.take([REF], now=200.0) == []  # wanted again: a fresh first delay
    schedule.retry(REF, 201.0)
    assert schedule.take([REF], now=201.0) == [REF]
    immediate = pj.Schedule(interval=5.0, first_delay=0.0)
    assert immediate.take([REF], now=0.0) == [REF]


async def test_the_loop_runs_due_jobs_and_retries_a_failed_run_after_its_delay() -> None:
    runs: list[tuple[str, float]] = []
    ready = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def action(ref: pj.Ref) -> None:
        runs.append((ref[1], loop.time()))
        if len(runs) == 1:
            raise kopf.TemporaryError("API hiccup", delay=0.05)

    job = pj.Job(pj.RECHECK, pj.Schedule(interval=10.0, first_delay=0.0), action)
    index = {pj.RECHECK: [REF]}
    task = asyncio.create_task(pj.run_jobs([job], index, ready, error_delay=1.0))
    await asyncio.sleep(0.1)
    assert runs == []  # nothing before kopf has indexed every SessionMemory
    ready.set()
    for _ in range(100):
        if len(runs) >= 2:
            break
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [name for name, _ in runs] == ["s1", "s1"]  # the failed run again, not one interval later
    assert runs[1][1] - runs[0][1] < 5.0
