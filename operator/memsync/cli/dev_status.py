"""``memsync dev``'s status line: one line on stderr with the running sync agent's numbers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, get_args

from memsync.agent.recorder import PassOutcome


class StatusLine:
    """One line on stderr, redrawn in place on a terminal; elsewhere a plain line whenever it changes."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._shown = False
        self._last = ""
        self._lock = threading.Lock()

    def show(self, text: str) -> None:
        with self._lock:
            if self.tty:
                self.stream.write("\r\x1b[K" + text)
                self.stream.flush()
                self._shown = True
            elif text != self._last:
                self.stream.write(text + "\n")
                self.stream.flush()
            self._last = text

    def clear(self) -> None:
        with self._lock:
            if self.tty and self._shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._shown = False


class ClearStatusFirst(logging.Filter):
    """Wipe the status line before a log record is printed, so the two never share a line."""

    def __init__(self, status: StatusLine) -> None:
        super().__init__()
        self.status = status

    def filter(self, record: logging.LogRecord) -> bool:
        self.status.clear()
        return True


@dataclass
class DevNumbers:
    """The numbers of ``memsync dev``'s status line, read from the agent's metrics."""

    passes: int = 0
    last_sync: float | None = None
    uploads: int = 0
    downloads: int = 0
    conflicts: int = 0
    deletes: int = 0
    refused: int = 0
    unreadable: int = 0
    pending: int = 0  # local deletions waiting for their confirmation window
    pending_due: float | None = None  # when the first of them is confirmed (Unix time)


def read_counts(
    agent: Any, store_id: str, pending_since: Iterable[float] = (), window: float = 0.0
) -> DevNumbers:
    """The running agent's numbers, from its Prometheus registry (passes exclude the mount);
    ``pending_since``: when each local deletion still waiting was first seen (the saved state's), and
    ``window`` the confirmation window it waits for."""
    registry = agent.metrics.registry

    def value(name: str, **labels: str) -> float:
        return float(registry.get_sample_value(name, {"store": store_id, **labels}) or 0.0)

    passes = sum(int(value("memsync_sync_passes_total", outcome=o)) for o in _OUTCOMES)
    last = value("memsync_last_successful_pass_timestamp_seconds")
    since = list(pending_since)
    return DevNumbers(
        passes=passes,
        last_sync=last or None,
        uploads=int(value("memsync_uploads_total")),
        downloads=int(value("memsync_downloads_total")),
        conflicts=int(value("memsync_conflicts_total")),
        deletes=int(value("memsync_remote_deletes_total")),
        refused=int(value("memsync_refused_paths")),
        unreadable=int(value("memsync_unreadable_files")),
        pending=len(since),
        pending_due=min(since) + window if since else None,
    )


_OUTCOMES = get_args(PassOutcome)


def format_status(name: str, counts: DevNumbers, now: float, tty: bool) -> str:
    if counts.last_sync is None:
        last = "not yet"
    else:
        ago = max(0, int(now - counts.last_sync))
        last = time.strftime("%H:%M:%S", time.localtime(counts.last_sync)) + (f" ({ago}s ago)" if tty else "")
    deletes = f"deletes {counts.deletes}"
    if counts.pending and counts.pending_due is not None:
        left = max(0, int(counts.pending_due - now + 0.999))
        deletes += f" (+{counts.pending} pending, confirmed in {left}s)"
    text = (
        f"memsync dev: {name}: passes {counts.passes}, last sync {last}, uploads {counts.uploads}, "
        f"downloads {counts.downloads}, {deletes}, conflicts {counts.conflicts}, refused {counts.refused}, "
        f"unreadable {counts.unreadable}"
    )
    return text + (" | Ctrl-C to stop" if tty else "")
