"""Run the store server (``python -m memsync store serve``) as a child process on a loopback port.

One piece of code for everything that wants a real server it owns: the test fixtures and the benchmarks
(``bench/_common.py`` puts ``tests/`` on ``sys.path`` to import it). The admin key goes to the child through
its environment (``MEMSYNC_ADMIN_KEY``), never on its command line, where a process listing would show it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0


def free_port() -> int:
    """A port the kernel just handed out on loopback (free at the time of the call)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def spawn_store_server(
    *,
    port: int,
    db_path: Path | str,
    log_path: Path,
    env: Mapping[str, str],
    extra_args: Sequence[str] = (),
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``memsync store serve`` on ``HOST:port`` over ``db_path`` (an SQLite file or a PostgreSQL URL),
    its output appended to ``log_path``.

    ``env`` is the child's whole environment (it carries ``MEMSYNC_ADMIN_KEY``).
    """
    log = log_path.open("ab")
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memsync",
                "store",
                "serve",
                "--host",
                HOST,
                "--port",
                str(port),
                "--db",
                str(db_path),
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=str(cwd) if cwd is not None else None,
        )
    finally:
        log.close()


def wait_until_ready(
    process: subprocess.Popen[bytes],
    url: str,
    *,
    timeout_s: float = STARTUP_TIMEOUT_S,
    log_text: Callable[[], str] = lambda: "",
) -> None:
    """Poll ``url/healthz`` until it answers 200. Raises RuntimeError (with the server's log) if the process
    exits first or does not answer in time; the caller stops it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"store server exited with {process.returncode} before answering:\n{log_text()}"
            )
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"store server did not answer within {timeout_s:g}s:\n{log_text()}")


def stop_process(process: subprocess.Popen[bytes] | None, *, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``. Idempotent (a process already gone is left alone)."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def kill_process(process: subprocess.Popen[bytes] | None, *, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """SIGKILL at once (no graceful shutdown). Idempotent."""
    if process is None or process.poll() is not None:
        return
    process.kill()
    process.wait(timeout=timeout_s)


def run_cli(
    *args: str, url: str | None = None, admin_key: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m memsync ARGS`` with no inherited ``MEMSYNC_*`` setting but the server's URL and admin key
    (through the environment, as users pass them); its output as text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    if url is not None:
        env["MEMSYNC_STORE_URL"] = url
    if admin_key is not None:
        env["MEMSYNC_ADMIN_KEY"] = admin_key
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
