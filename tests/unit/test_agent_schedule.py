"""The sidecar's schedule (memsync.agent.schedule) and the loop's pure helpers: when a store syncs next."""

from __future__ import annotations

import pytest

from memsync.agent import schedule
from memsync.agent.loop import not_ours, store_of, wrote_locally
from memsync.agent.recorder import PassStats
from memsync.agent.schedule import StoreClock, Timing

ON = Timing()
OFF = Timing(early=False)


def after_pass(start: float, end: float, *, wrote: bool = False, interval: float = 15.0) -> StoreClock:
    clock = schedule.started(StoreClock(periodic_due=0.0), start)
    return schedule.ended(clock, end, wrote=wrote, periodic_due=start + interval)


def test_first_pass_is_due_at_start() -> None:
    assert schedule.next_pass_at(StoreClock(periodic_due=100.0), ON) == 100.0


def test_without_a_change_the_periodic_pass() -> None:
    assert schedule.next_pass_at(after_pass(0.0, 0.2), ON) == 15.0


def test_a_change_after_a_quiet_period_starts_a_pass_once_it_settles() -> None:
    clock = schedule.seen(after_pass(0.0, 0.2), 9.0, ON)
    assert schedule.next_pass_at(clock, ON) == 9.0 + schedule.SETTLE_S


def test_a_burst_is_one_pass_after_its_last_change() -> None:
    clock = after_pass(0.0, 0.2)
    for i in range(50):
        clock = schedule.seen(clock, 9.0 + i * 0.01, ON)
    assert schedule.next_pass_at(clock, ON) == pytest.approx(9.49 + schedule.SETTLE_S)


def test_never_sooner_than_the_minimum_gap_after_the_last_pass_started() -> None:
    clock = schedule.seen(after_pass(0.0, 0.2), 1.0, ON)
    assert schedule.next_pass_at(clock, ON) == schedule.MIN_GAP_S


def test_never_later_than_the_periodic_pass() -> None:
    clock = schedule.seen(after_pass(0.0, 0.2, interval=5.0), 4.9, ON)
    assert schedule.next_pass_at(clock, ON) == 5.0


def test_early_sync_off_ignores_changes() -> None:
    clock = schedule.seen(after_pass(0.0, 0.2), 9.0, OFF)
    assert clock.changed_at is None
    assert schedule.next_pass_at(clock, OFF) == 15.0


def test_a_pass_takes_every_change_seen_before_it_started() -> None:
    clock = schedule.seen(after_pass(0.0, 0.2), 9.0, ON)
    clock = schedule.ended(schedule.started(clock, 9.75), 10.0, wrote=False, periodic_due=24.75)
    assert clock.changed_at is None
    assert schedule.next_pass_at(clock, ON) == 24.75


def test_a_change_during_a_pass_that_wrote_nothing_counts_once_it_ends() -> None:
    clock = schedule.seen(schedule.started(StoreClock(periodic_due=0.0), 0.0), 0.1, ON)
    assert clock.changed_at is None  # not while the pass runs
    clock = schedule.ended(clock, 0.3, wrote=False, periodic_due=15.0)
    assert clock.changed_at == 0.1
    assert schedule.next_pass_at(clock, ON) == schedule.MIN_GAP_S


def test_the_writes_of_a_pass_that_pulled_do_not_start_another() -> None:
    clock = schedule.seen(schedule.started(StoreClock(periodic_due=0.0), 0.0), 0.1, ON)
    clock = schedule.ended(clock, 0.3, wrote=True, periodic_due=15.0)
    clock = schedule.seen(clock, 0.3 + schedule.OWN_WRITES_S / 2, ON)  # inotify delivers a little later
    assert clock.changed_at is None
    assert schedule.next_pass_at(clock, ON) == 15.0


def test_a_change_well_after_a_pass_that_pulled_counts() -> None:
    clock = schedule.seen(after_pass(0.0, 0.3, wrote=True), 0.3 + schedule.OWN_WRITES_S + 0.1, ON)
    assert clock.changed_at is not None
    assert schedule.next_pass_at(clock, ON) == schedule.MIN_GAP_S


def test_wrote_locally() -> None:
    assert not wrote_locally(PassStats(uploads=3))
    assert wrote_locally(PassStats(local_writes=1))
    assert wrote_locally(PassStats(outcome="recovered"))


def test_the_watcher_ignores_memsyncs_temp_files_only() -> None:
    assert not not_ours(None, "/mnt/memory/s/notes/.fs-0123456789abcdef.tmp")
    assert not_ours(None, "/mnt/memory/s/notes/a.md")
    assert not_ours(None, "/mnt/memory/s/.git/config")  # watchfiles' default filter would drop it


def test_store_of_a_path() -> None:
    folders = {"/mnt/memory/a": "s1", "/mnt/memory/ab": "s2"}
    assert store_of("/mnt/memory/ab/x.md", folders) == "s2"
    assert store_of("/mnt/memory/a/x/y.md", folders) == "s1"
    assert store_of("/mnt/memory/a", folders) == "s1"
    assert store_of("/mnt/memory/abc/x.md", folders) is None
