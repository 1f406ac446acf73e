"""Shared helpers for the benchmarks: run the real store server as a subprocess, time calls, print tables.

Import with ``bench/`` on ``sys.path`` (each bench script puts it there):
``from _common import StoreServerProcess``. The server launcher is the tests' own (``tests/support/``), so
this module puts ``tests/`` on ``sys.path`` too.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.server_process import free_port, spawn_store_server, stop_process, wait_until_ready

__all__ = ["API_HEADERS", "StoreServerProcess", "format_table", "free_port", "percentile"]

API_HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "agent-memory-2026-07-22"}


class StoreServerProcess:
    """``python -m memsync store serve`` on a free loopback port with a throwaway SQLite file.

    Use as a context manager; it stops the server (SIGTERM, then SIGKILL) and removes the directory.
    """

    def __init__(self, *extra_args: str, startup_timeout_s: float = 30.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_key = "sk-bench-" + secrets.token_urlsafe(24)
        self._tmp = tempfile.TemporaryDirectory(prefix="memsync-bench-")
        self.db_path = Path(self._tmp.name) / "store.db"
        self.log_path = Path(self._tmp.name) / "server.log"
        self._extra = extra_args
        self._timeout = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> StoreServerProcess:
        env = {**os.environ, "MEMSYNC_ADMIN_KEY": self.admin_key, "MEMSYNC_LOG_LEVEL": "WARNING"}
        self._proc = spawn_store_server(
            port=self.port, db_path=self.db_path, log_path=self.log_path, env=env, extra_args=self._extra
        )
        try:
            wait_until_ready(
                self._proc,
                self.url,
                timeout_s=self._timeout,
                log_text=lambda: self.log_path.read_text(errors="replace"),
            )
        except RuntimeError:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop_process(self._proc)
        self._tmp.cleanup()

    def admin_headers(self) -> dict[str, str]:
        return {**API_HEADERS, "x-api-key": self.admin_key}


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (pastes straight into the README)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(r) for r in cells)
    return "\n".join(out)
