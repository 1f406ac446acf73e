"""The fleet benchmark's arithmetic (bench/operator_fleet.py, bench/fleet): a probe not seen in time is never
reported as fast, a target is judged on the run at N = 5,000 only, and the operator's CPU over a window is
its CPU time over the window's wall time (the peak over 5 s)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

import operator_fleet  # noqa: E402
from fleet import stages  # noqa: E402
from fleet.probes import MISSED, Timings  # noqa: E402
from fleet.report import Result, rows  # noqa: E402


def test_a_probe_not_seen_in_time_is_slower_than_any_and_counted() -> None:
    timings = Timings(main=sorted([0.5] * 98 + [MISSED, MISSED]), side=[1.0] * 100)
    assert timings.percentile(50) == 0.5
    assert timings.percentile(99) == math.inf
    assert (timings.seen, timings.missed) == (98, 2)
    assert Timings().percentile(99) is None  # no probe: no figure, not 0


def _row(results: list[Result], label: str) -> tuple[str, ...]:
    [row] = [r for r in rows(results) if r[0] == label]
    return row


def test_the_table_says_a_missed_probe_exceeded_its_bound_and_judges_the_target_at_5000() -> None:
    late = Result(5000, {"health p99": math.inf, "probe timeout": 600.0, "writes": 0.0})
    assert _row([late], "sidecar unhealthy -> Synced=False, p99")[1:] == ("> 600 s", "p99 <= 10 s (missed)")
    assert _row([late], "  of which writes")[1:] == ("0.00 /s", "0 /s (met)")
    small = Result(1000, {"health p99": 3.0})
    assert _row([small], "sidecar unhealthy -> Synced=False, p99")[1:] == ("3.0 s", "p99 <= 10 s")
    assert _row([small], "operator peak RSS (whole run)")[1] == "-"


def test_cpu_over_a_window_is_cpu_time_over_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = operator_fleet.CpuSamples.__new__(operator_fleet.CpuSamples)
    # 0.5 core for 10 s, then a full core for 10 s: average 0.75, peak over 5 s 1.0.
    samples.samples = [(float(t), 0.5 * t if t <= 10 else 5 + (t - 10)) for t in range(21)]
    average, peak = samples.window(0, 20)
    assert average == pytest.approx(0.75)
    assert peak == pytest.approx(1.0)
    assert samples.window(100, 200) == (0.0, 0.0)


def test_the_sessions_ask_for_the_kwok_nodes_and_share_one_store() -> None:
    session = operator_fleet.session(7)
    template = session["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {stages.NODE_LABEL[0]: stages.NODE_LABEL[1]}
    [toleration] = template["tolerations"]
    assert {k: toleration[k] for k in ("key", "value", "effect")} == stages.NODE_TAINT
    assert [s["memoryStoreId"] for s in session["spec"]["stores"]] == [stages.STORE_ID]
    node = stages.node(0)
    assert node["spec"]["taints"] == [stages.NODE_TAINT]
    assert int(node["status"]["capacity"]["pods"]) >= stages.PODS_PER_NODE
    assert stages.node_count(5000) * stages.PODS_PER_NODE >= 5000
