"""The fleet benchmark's figures and how they are printed: one table per N, and every N side by side, with
the targets at N = 5,000."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from _common import format_table

PEAK_SPAN_S: Final = 5.0
#: Today's health poll of a running session; the target is twice this.
POLL_INTERVAL_S: Final = 5.0
TARGET_COUNT: Final = 5000
TARGETS: Final[dict[str, tuple[str, Callable[[float], bool]]]] = {
    "cpu": ("<= 0.25", lambda v: v <= 0.25),
    "rss": ("<= 600 MB", lambda v: v <= 600),
    "writes": ("0 /s", lambda v: v == 0),
    "health": (f"p99 <= {2 * POLL_INTERVAL_S:.0f} s", lambda v: v <= 2 * POLL_INTERVAL_S),
    "end": ("p99 <= 5 s", lambda v: v <= 5),
}


@dataclass
class Result:
    """One run's figures (seconds, cores, MB, per second); None where the run did not get that far."""

    count: int
    figures: dict[str, float | None] = field(default_factory=dict)
    verbs: dict[str, float] = field(default_factory=dict)
    cores: dict[str, float] = field(default_factory=dict)  # by process, in the steady-state window
    load: str = "-"  # the machine's load average (1, 5, 15 min) at the end of the steady-state window
    notes: list[str] = field(default_factory=list)


def _cell(r: Result, key: str, fmt: str) -> str:
    value = r.figures.get(key)
    if value is None:
        return "-"
    if value == math.inf:  # not seen within the probe's bound
        return f"> {r.figures.get('probe timeout') or 0:.0f} s"
    return fmt.format(value)


def _target(results: list[Result], key: str, value_key: str) -> str:
    """The target, and whether the run at N = 5,000 met it."""
    text, met = TARGETS[key]
    last = results[-1].figures.get(value_key)
    if last is None or results[-1].count != TARGET_COUNT:
        return text
    return text + (" (met)" if met(last) else " (missed)")


#: (label, figure, format, target key or "", second figure after a slash or "").
_ROWS: Final = (
    ("SessionMemories created (4 clients)", "created", "{:.0f} s", "", ""),
    ("every sandbox Pod exists (the operator created it)", "pods exist", "{:.0f} s", "", ""),
    ("every sandbox Pod Running (kwok)", "pods running", "{:.0f} s", "", ""),
    ("every session Running (creation burst to all Running)", "all running", "{:.0f} s", "", ""),
    ("steady-state window", "window", "{:.0f} s", "", ""),
    ("operator CPU, average (cores)", "cpu average", "{:.3f}", "cpu", ""),
    (f"operator CPU, peak over {PEAK_SPAN_S:.0f} s (cores)", "cpu peak", "{:.3f}", "", ""),
    ("operator peak RSS (whole run)", "rss", "{:.0f} MB", "rss", ""),
    ("operator API requests at steady state", "requests", "{:.1f} /s", "", ""),
    ("  of which writes", "writes", "{:.2f} /s", "writes", ""),
    ("VERBS", "", "", "", ""),
    ("sidecar /status requests at steady state", "status requests", "{:.1f} /s", "", ""),
    ("  held open at the window's end", "status waiting", "{:.0f}", "", ""),
    ("CORES", "", "", "", ""),
    ("sidecar unhealthy -> Synced=False, p50", "health p50", "{:.1f} s", "", ""),
    ("sidecar unhealthy -> Synced=False, p99", "health p99", "{:.1f} s", "health", ""),
    ("sidecar healthy again -> Synced=True, p50 / p99", "recover p50", "{:.1f} s", "", "recover p99"),
    ("  flips seen / not seen in time", "health n", "{:.0f}", "", "health missed"),
    ("Pod ended -> SessionMemory phase, p50", "end p50", "{:.1f} s", "", ""),
    ("Pod ended -> SessionMemory phase, p99", "end p99", "{:.1f} s", "end", ""),
    ("  label -> Pod ended (kwok), p50", "kwok end p50", "{:.1f} s", "", ""),
    ("  ends seen / not seen in time (or not Succeeded)", "end n", "{:.0f}", "", "end missed"),
    ("operator container restarts", "restarts", "{:.0f}", "", ""),
)


def rows(results: list[Result]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for label, key, fmt, goal, second in _ROWS:
        if label == "VERBS":  # the operator's requests by verb and resource, most frequent first
            verbs = sorted(
                {v for r in results for v in r.verbs}, key=lambda v: -max(r.verbs.get(v, 0) for r in results)
            )
            out += [(f"    {v}", *(f"{r.verbs.get(v, 0):.2f} /s" for r in results), "") for v in verbs]
        elif label == "CORES":  # where the machine's CPU went in the window
            names = list(dict.fromkeys(n for r in results for n in r.cores))
            for name in names:
                what = "machine, all processes" if name == "machine" else name
                out.append(
                    (
                        f"  CPU in the window: {what} (cores)",
                        *(f"{r.cores.get(name, 0):.2f}" for r in results),
                        "",
                    )
                )
        else:
            cells = [_cell(r, key, fmt) + (" / " + _cell(r, second, fmt) if second else "") for r in results]
            out.append(
                (label, *cells, _target(results, goal, key) if goal else ("0" if key == "restarts" else ""))
            )
    return out


def print_table(results: list[Result]) -> None:
    headers = ("measure", *(f"N = {r.count:,}" for r in results), "target at 5,000")
    load = ("machine load (1, 5, 15 min), end of the window", *(r.load for r in results), "")
    table = [*rows(results), load]
    print(format_table(headers, table), flush=True)
    for r in results:
        for note in r.notes:
            print(f"N = {r.count:,}: {note}", flush=True)
