"""``memsync dev`` as a process a test drives: wait for its output, interrupt it as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

WAIT_S = 30.0
MARKER = ".anthropic-memory-store"


CHECKOUT: tuple[str, ...] = (sys.executable, "-m", "memsync")


class DevProcess:
    """``memsync dev --port PORT --interval 5`` in ``cwd``; ``memsync`` is this checkout's unless given."""

    def __init__(
        self, cwd: Path, port: int, memsync: Sequence[str | Path] = (sys.executable, "-m", "memsync")
    ) -> None:
        self.cwd = cwd
        self.port = port
        self.log = cwd / f"dev-{time.monotonic_ns()}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*map(str, memsync), "dev", "--port", str(port), "--interval", "5"],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    @property
    def base(self) -> Path:
        return self.cwd / ".memsync"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(
        self, what: str, check: Callable[[], bool], timeout: float = WAIT_S, poll: float = 0.1
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"memsync dev exited ({self.proc.returncode}) before {what}:\n{self.output()}"
                )
            time.sleep(poll)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output()}")

    def wait_mounted(self) -> None:
        """``memsync dev`` prints this line once the agent's mount finished (every file written)."""
        self.wait_for("the demo store to be mounted", lambda: "is mounted at" in self.output())

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"memsync dev did not stop after SIGINT:\n{self.output()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
