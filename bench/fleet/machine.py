"""Where the machine's CPU went during a window: the cores each named process used (from its CPU time in
``/proc``), and the whole machine's busy cores (``/proc/stat``), so a figure of the operator can be read
against what else ran."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from operator_scale import cpu_seconds

TICKS = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> dict[str, int]:
    """The direct children of ``pid`` by their command name (``/proc/PID/comm``)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found[comm] = int(entry.name)
    return found


def busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (every core), since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / TICKS


class CpuWindow:
    """The cores each process of ``pids`` (name -> pid), and the machine, used from ``start`` to ``stop``."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self.before: dict[str, float | None] = {}
        self.cores: dict[str, float] = {}

    def _now(self) -> dict[str, float | None]:
        return {"machine": busy_seconds(), **{name: cpu_seconds(pid) for name, pid in self.pids.items()}}

    def start(self, at: float) -> None:
        self.started = at
        self.before = self._now()

    def stop(self, at: float) -> dict[str, float]:
        after = self._now()
        span = at - self.started
        for name, then in self.before.items():
            now = after.get(name)
            if then is not None and now is not None and span > 0:
                self.cores[name] = (now - then) / span
        return self.cores
