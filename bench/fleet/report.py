"""The fleet benchmark's figures and how they are printed: one table per N, and every N side by side, with
the targets at N = 5,000."""

from __future__ import annotations

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
    notes: list[str] = field(default_factory=list)


def rows(results: list[Result]) -> list[tuple[str, ...]]:
    def cell(r: Result, key: str, fmt: str) -> str:
        value = r.figures.get(key)
        return "-" if value is None else fmt.format(value)

    def target(key: str, value_key: str) -> str:
        text, met = TARGETS[key]
        last = results[-1].figures.get(value_key)
        verdict = (
            ""
            if last is None or results[-1].count != TARGET_COUNT
            else (" (met)" if met(last) else " (missed)")
        )
        return text + verdict

    spec: list[tuple[str, str, str, str]] = [
        ("SessionMemories created (4 clients)", "created", "{:.0f} s", ""),
        ("every sandbox Pod Running (kwok)", "pods running", "{:.0f} s", ""),
        ("every session Running (creation burst to all Running)", "all running", "{:.0f} s", ""),
        ("steady-state window", "window", "{:.0f} s", ""),
        ("operator CPU, average (cores)", "cpu average", "{:.3f}", target("cpu", "cpu average")),
        (f"operator CPU, peak over {PEAK_SPAN_S:.0f} s (cores)", "cpu peak", "{:.3f}", ""),
        ("operator peak RSS", "rss", "{:.0f} MB", target("rss", "rss")),
        ("operator API requests at steady state", "requests", "{:.1f} /s", ""),
        ("  of which writes", "writes", "{:.2f} /s", target("writes", "writes")),
        ("sidecar /status requests at steady state", "status requests", "{:.1f} /s", ""),
        ("  held open at the window's end", "status waiting", "{:.0f}", ""),
        ("sidecar unhealthy -> Synced=False, p50", "health p50", "{:.1f} s", ""),
        ("sidecar unhealthy -> Synced=False, p99", "health p99", "{:.1f} s", target("health", "health p99")),
        ("sidecar healthy again -> Synced=True, p50 / p99", "recover p50", "{:.1f} s", ""),
        ("  flips measured / timed out", "health n", "{:.0f}", ""),
        ("Pod ended -> SessionMemory phase, p50", "end p50", "{:.1f} s", ""),
        ("Pod ended -> SessionMemory phase, p99", "end p99", "{:.1f} s", target("end", "end p99")),
        ("  label -> Pod ended (kwok), p50", "kwok end p50", "{:.1f} s", ""),
        ("  ends measured / timed out or not Succeeded", "end n", "{:.0f}", ""),
        ("operator container restarts", "restarts", "{:.0f}", "0"),
    ]
    extra = {
        "recover p50": ("recover p99", "{:.1f} s"),
        "health n": ("health missed", "{:.0f}"),
        "end n": ("end missed", "{:.0f}"),
    }
    out = []
    for label, key, fmt, goal in spec:
        cells = []
        for r in results:
            text = cell(r, key, fmt)
            if key in extra:
                text += " / " + cell(r, extra[key][0], extra[key][1])
            cells.append(text)
        out.append((label, *cells, goal))
    verbs = sorted(
        {v for r in results for v in r.verbs}, key=lambda v: -max(r.verbs.get(v, 0) for r in results)
    )
    out += [(f"  {verb}", *(f"{r.verbs.get(verb, 0):.2f} /s" for r in results), "") for verb in verbs]
    return out


def print_table(results: list[Result], load: dict[int, str]) -> None:
    headers = ("measure", *(f"N = {r.count:,}" for r in results), "target at 5,000")
    table = [
        *rows(results),
        ("machine load (1, 5, 15 min) at the end", *(load[r.count] for r in results), ""),
    ]
    print(format_table(headers, table), flush=True)
    for r in results:
        for note in r.notes:
            print(f"N = {r.count:,}: {note}", flush=True)
