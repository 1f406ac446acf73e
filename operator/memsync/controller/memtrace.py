"""A debugging aid: where the operator's memory goes, by allocation traceback (off unless asked for).

With ``MEMSYNC_TRACEMALLOC=/path/file`` in its environment the operator starts :mod:`tracemalloc` at once
(``MEMSYNC_TRACEMALLOC_FRAMES`` frames per allocation, default 12) and, on every ``SIGUSR2``, writes to
that file the Python heap it traces: the total, then the largest allocation sites by line and by
traceback. Tracing costs CPU and about as much memory again as it traces, so it is for measuring
(``bench/operator_scale.py --trace-memory``), never for production. Nothing an allocation holds is written,
only where it was made.
"""

from __future__ import annotations

import os
import signal
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Final

ENV_PATH: Final = "MEMSYNC_TRACEMALLOC"
ENV_FRAMES: Final = "MEMSYNC_TRACEMALLOC_FRAMES"
DEFAULT_FRAMES: Final = 12
TOP: Final = 25


def report(snapshot: tracemalloc.Snapshot, *, top: int = TOP) -> str:
    """The snapshot as text: the total, the ``top`` lines and the ``top`` tracebacks by size."""
    snapshot = snapshot.filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
    by_line = snapshot.statistics("lineno")
    total = sum(stat.size for stat in by_line)
    out = [f"traced: {total / 2**20:.1f} MiB in {sum(s.count for s in by_line)} blocks", "", "by line:"]
    out += [f"{s.size / 2**20:8.2f} MiB {s.count:8d} blocks  {s.traceback[0]}" for s in by_line[:top]]
    out += ["", "by traceback (innermost last):"]
    for stat in snapshot.statistics("traceback")[:top]:
        out.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} blocks")
        out += [f"    {frame}" for frame in stat.traceback]
    return "\n".join(out) + "\n"


def install_from_env(environ: dict[str, str] | None = None) -> Path | None:
    """Start tracing and dump on SIGUSR2 when ``MEMSYNC_TRACEMALLOC`` names a file; else do nothing."""
    env = os.environ if environ is None else environ
    target = env.get(ENV_PATH)
    if not target:
        return None
    path = Path(target)
    frames = int(env.get(ENV_FRAMES) or DEFAULT_FRAMES)
    tracemalloc.start(frames)

    def dump(_signum: int, _frame: FrameType | None) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(report(tracemalloc.take_snapshot()))
        partial.replace(path)

    signal.signal(signal.SIGUSR2, dump)
    return path
