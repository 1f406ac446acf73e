"""The soak's moving parts: the store server, the fault proxy in front of it, and 'Pods' running the real
``memsync mount`` and ``memsync sync`` processes against it, with their folders, logs and termination reports.

A Pod here is what the operator's sandbox Pod is on this machine: its absolute paths are mapped under a temp
dir with the test-only ``MEMSYNC_TEST_ROOT``, and its work-item secret points at the fault proxy. When the
tests run as root, the agents run with ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` dropped (``setpriv``),
so a mode-000 file is as unreadable to them as another uid's file is in a real Pod.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.api.constants import MARKER_FILENAME
from memsync.api.secret import decode_work_secret, encode_work_secret

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from latency_proxy import FaultPlan, LatencyProxy  # noqa: E402

SYNC_INTERVAL_S = 5  # the agent's minimum
FLUSH_TIMEOUT_S = 30  # the sidecar's default flush budget
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


class ProxyThread:
    """The fault proxy on its own event loop in a background thread (the test's loop blocks on processes)."""

    def __init__(self, upstream: str, plan: FaultPlan, observe: Callable[[str, str, bytes], None]) -> None:
        self.proxy = LatencyProxy(upstream, delay_s=0.0, faults=plan, observe=observe)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="soak-proxy", daemon=True)

    def start(self) -> str:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(timeout=30)
        return self.proxy.url

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@dataclass
class Pod:
    """One session: its stores (id -> mount path), env, the running sidecar and its JSON log file."""

    name: str
    root: Path
    session_id: str
    stores: dict[str, str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    log_files: list[Path] = field(default_factory=list)

    def folder(self, store_id: str) -> Path:
        return self.root / self.stores[store_id].lstrip("/")

    def _command(self, *args: str) -> list[str]:
        prefix = DROP_DAC if os.geteuid() == 0 else []
        return [*prefix, sys.executable, "-m", "memsync", *args]

    def mount(self, attempts: int = 8) -> None:
        """``memsync mount``, retried the way kubelet restarts a failed init container (the faults hit it)."""
        for attempt in range(attempts):
            log = self.root / f"mount-{attempt}.log"
            with log.open("wb") as out:
                code = subprocess.run(
                    self._command("mount"),
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=120,
                    check=False,
                ).returncode
            self.log_files.append(log)
            if code == 0:
                return
        raise AssertionError(f"{self.name}: mount failed {attempts} times; see {self.root}/mount-*.log")

    def start(self) -> None:
        log = self.root / f"sync-{self.starts}.log"
        self.starts += 1
        self.log_files.append(log)
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                self._command("sync"), env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_started(self, timeout: float = 120.0) -> None:
        """Until the running sidecar logs its start line (from then on SIGTERM runs its final flush), as the
        kubelet waits for a restarted sidecar to start. Polls its log file; fails if the process exits."""
        assert self.proc is not None
        log = self.log_files[-1]
        deadline = time.monotonic() + timeout
        while b"memsync sync starting" not in log.read_bytes():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: the sidecar exited ({self.proc.returncode}); see {log}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: sidecar not started after {timeout} s; see {log}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, as the kubelet does to a sidecar past its grace period or on OOM."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def signal_end(self) -> None:
        """SIGTERM (the session ended): the final sync and flush run."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait_end(self) -> int:
        """The sidecar's exit code: 0 when the final flush saved everything."""
        assert self.proc is not None
        return self.proc.wait(timeout=FLUSH_TIMEOUT_S * 3)

    def termination(self) -> dict[str, Any]:
        path = self.root / "dev/termination-log"
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        return data

    def log_records(self) -> list[dict[str, Any]]:
        """Every JSON log line the pod's processes wrote (other lines, e.g. a crash, are kept as text)."""
        records: list[dict[str, Any]] = []
        for log in self.log_files:
            for line in log.read_text(errors="replace").splitlines():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    records.append({"level": "TEXT", "message": line})
        return records

    def local_files(self, store_id: str) -> dict[str, str | None]:
        """rel path -> content (None when the file cannot be read) of every regular file in the folder."""
        base = self.folder(store_id)
        found: dict[str, str | None] = {}
        for dirpath, _, names in os.walk(base):
            for name in names:
                full = Path(dirpath) / name
                rel = full.relative_to(base).as_posix()
                if rel == MARKER_FILENAME or full.is_symlink():
                    continue
                try:
                    found[rel] = full.read_text() if os.stat(full).st_mode & 0o444 else None
                except (OSError, UnicodeDecodeError):
                    found[rel] = None
        return found


def make_pod(
    name: str, base: Path, *, session_id: str, secret: str, proxy_url: str, stores: dict[str, str]
) -> Pod:
    """A Pod whose work-item secret sends every request of its agent through ``proxy_url``."""
    root = base / name
    if root.exists():
        shutil.rmtree(root)
    (root / "dev").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSYNC_", "ANTHROPIC_"))}
    env.update(
        {
            "MEMSYNC_TEST_ROOT": str(root),
            "MEMSYNC_STORES": json.dumps(
                [
                    {"memory_store_id": sid, "name": sid, "mount_path": mount, "access": "read_write"}
                    for sid, mount in stores.items()
                ]
            ),
            "ANTHROPIC_WORK_SECRET": encode_work_secret(decode_work_secret(secret).sessions_token, proxy_url),
            "MEMSYNC_SYNC_INTERVAL": str(SYNC_INTERVAL_S),
            "MEMSYNC_EARLY_SYNC": "true",  # the sidecars' default: passes soon after the driver's writes too
            "MEMSYNC_TEST_DELETE_WINDOW": "0",
            "MEMSYNC_FLUSH_TIMEOUT": str(FLUSH_TIMEOUT_S),
            "MEMSYNC_SESSION_ID": f"sesn_soak_{name}",
            "MEMSYNC_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return Pod(name=name, root=root, session_id=session_id, stores=stores, env=env)
