"""The per-store recorder: counts for the command and the session, gauges, health."""

from __future__ import annotations

from memsync.agent.metrics import Metrics
from memsync.agent.recorder import Recorder
from memsync.contracts.report import StoreCounts


def gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"store": "memstore_a"})


def test_counts_reach_the_command_the_session_and_the_metrics() -> None:
    metrics = Metrics()
    rec = Recorder("memstore_a", metrics)
    rec.bump(uploaded=2, conflicts=1)
    totals = StoreCounts(uploaded=5)
    totals.add(rec.take_delta())
    rec.bump(downloaded=3)
    assert (rec.tally.uploaded, rec.tally.downloaded, rec.tally.conflicts) == (2, 3, 1)
    assert (totals.uploaded, totals.conflicts, totals.downloaded) == (7, 1, 0)  # the rest at the next save
    assert gauge(metrics, "memsync_uploads_total") == 2 and gauge(metrics, "memsync_downloads_total") == 3


def test_problems_are_gauges_with_printable_samples() -> None:
    metrics = Metrics()
    rec = Recorder("memstore_a", metrics)
    totals = StoreCounts()
    odd = b"bad-\xff.md".decode("utf-8", "surrogateescape")
    rec.problems(refused=["b", "a", "a"], unreadable=[odd, "x", "y", "z", "w", "v"], held=["h"]).into(totals)
    assert rec.tally.refused == 2 and rec.tally.refused_paths == ["a", "b"]
    assert totals.unreadable == 6 and len(totals.unreadable_paths) == 5
    assert "bad-\ufffd.md" in totals.unreadable_paths
    assert gauge(metrics, "memsync_unreadable_files") == 6 and gauge(metrics, "memsync_held_deletes") == 1
    rec.problems(refused=[], unreadable=[]).into(
        totals
    )  # a flush: held deletes stay as the last sync left them
    assert totals.unreadable == 0 and totals.held_deletes == 1


def test_health_fails_with_the_error_and_recovers() -> None:
    metrics = Metrics()
    rec = Recorder("memstore_a", metrics)
    rec.outcome("synced", None, 1_796_065_588.0)
    assert rec.health.healthy and rec.health.last_success == "2026-11-30T19:06:28Z" and metrics.all_ready
    rec.outcome("failed", "memory sync failed: boom", None)
    rec.outcome("synced", "failed to upload memory /a.md: HTTP 503", None)  # a pass with failed transfers
    assert not rec.health.healthy and rec.health.failing_passes == 2 and not metrics.all_ready
    assert rec.health.last_error == "failed to upload memory /a.md: HTTP 503"
    assert rec.health.last_success == "2026-11-30T19:06:28Z"
    rec.outcome("synced", None, 1_796_065_600.0)
    assert rec.health.healthy and rec.health.last_error is None and rec.health.failing_passes == 0
