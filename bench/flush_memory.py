"""Memory of the sidecar's preStop flush, beside the running sync, against the sidecar's memory limit.

The preStop hook runs ``memsync flush`` as a second process inside the ``memsync-sync`` container, while
``memsync sync`` still runs there: both count against the container's one memory limit (512 MiB by
default, ``spec.template.spec.memsync.resources``). An OOM kill then would cost the preStop flush, or the
sync with its final flush. For each size (stores x memories of about 1 kB, with some changed files), this
bench runs the real commands as the Pod does (``memsync store serve`` on SQLite, ``memsync mount``,
``memsync sync``, then ``memsync flush`` while the sync runs) and prints the sync's resident memory, the
flush's peak, their sum and its share of the limit.

    .venv/bin/python bench/flush_memory.py                     # 1 x 2,000 and 8 x 2,000
    .venv/bin/python bench/flush_memory.py --sizes 1x2000      # one size

Everything runs on loopback in a temp dir; every step is bounded and the processes are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import StoreServerProcess, format_table, free_port

LIMIT_MIB = 512  # controller/sessionmemory/pod.py MEMSYNC_RESOURCES
CHANGED = 500
FILES_PER_FOLDER = 100
STEP_TIMEOUT_S = 600


def memsync(*args: str, env: dict[str, str], timeout: float = STEP_TIMEOUT_S) -> str:
    """Run one ``memsync`` command to its end; its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "memsync", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memsync {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def write_tree(root: Path, n: int) -> None:
    for i in range(n):
        path = root / f"folder-{i // FILES_PER_FOLDER:03d}" / f"note-{i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# note {i}\n" + "memory line of about a kilobyte. " * 30 + "\n")


def vm_kib(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of a running process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = STEP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("memsync sync exited before it was ready")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("memsync sync was not ready in time")


def measure(stores: int, memories: int, work: Path) -> list[object]:
    with StoreServerProcess() as server:
        admin = {**os.environ, "MEMSYNC_ADMIN_KEY": server.admin_key, "MEMSYNC_LOG_LEVEL": "WARNING"}
        seed = work / "seed"
        write_tree(seed, memories)
        ids = []
        for s in range(stores):
            store_id = memsync("store", "create", f"Bench {s}", "--url", server.url, env=admin)
            memsync("store", "import", store_id, str(seed), "--url", server.url, "--no-progress", env=admin)
            ids.append(store_id)
        token_args = [arg for store_id in ids for arg in ("--store", store_id)]
        secret = memsync("store", "token", *token_args, "--url", server.url, env=admin)
        root = work / "pod"
        (root / "dev").mkdir(parents=True)
        pod_env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSYNC_", "ANTHROPIC_"))}
        pod_env.update(
            {
                "MEMSYNC_TEST_ROOT": str(root),
                "ANTHROPIC_WORK_SECRET": secret,
                "MEMSYNC_STORES": json.dumps(
                    [
                        {"memory_store_id": sid, "name": f"Bench {i}", "mount_path": f"/mnt/memory/b{i}"}
                        for i, sid in enumerate(ids)
                    ]
                ),
                "MEMSYNC_SYNC_INTERVAL": "3600",
                "MEMSYNC_LOG_LEVEL": "WARNING",
            }
        )
        memsync("mount", env=pod_env)
        port = free_port()
        sync = subprocess.Popen(
            [sys.executable, "-m", "memsync", "sync"],
            env={**pod_env, "MEMSYNC_METRICS_PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_ready(port, sync)
            for i in range(CHANGED):  # spread over every store
                store_dir = root / "mnt" / "memory" / f"b{i % stores}"
                k = i // stores
                note = store_dir / f"folder-{k // FILES_PER_FOLDER:03d}" / f"note-{k:05d}.md"
                note.write_text(note.read_text() + f"changed {i}\n")
            sync_rss = vm_kib(sync.pid, "VmRSS")
            started = time.monotonic()
            flush = subprocess.Popen(
                [sys.executable, "-m", "memsync", "flush"],
                env=pod_env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _, status, usage = os.wait4(flush.pid, 0)
            took = time.monotonic() - started
            if os.waitstatus_to_exitcode(status) != 0:
                raise RuntimeError(f"memsync flush exited {os.waitstatus_to_exitcode(status)}")
            sync_peak = vm_kib(sync.pid, "VmHWM")
        finally:
            sync.send_signal(signal.SIGTERM)
            try:
                sync.wait(timeout=120)
            except subprocess.TimeoutExpired:
                sync.kill()
    flush_peak = usage.ru_maxrss  # KiB on Linux: the flush process's own peak (os.wait4)
    both = sync_rss + flush_peak
    return [
        f"{stores} x {memories:,}",
        CHANGED,
        f"{sync_rss / 1024:.0f}",
        f"{sync_peak / 1024:.0f}",
        f"{flush_peak / 1024:.0f}",
        f"{took:.1f}",
        f"{both / 1024:.0f}",
        f"{both / 1024 / LIMIT_MIB:.0%}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1x2000,8x2000", help="stores x memories, comma-separated")
    args = parser.parse_args()
    rows = []
    for size in args.sizes.split(","):
        stores, memories = (int(part) for part in size.split("x"))
        with tempfile.TemporaryDirectory(prefix="memsync-flush-bench-") as tmp:
            rows.append(measure(stores, memories, Path(tmp)))
    print(f"{platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()}")
    print(f"limit of the memsync-sync container: {LIMIT_MIB} MiB (the sync and the preStop flush share it)")
    headers = [
        "stores x memories",
        "changed",
        "sync RSS MiB",
        "sync peak MiB",
        "flush peak MiB",
        "flush s",
        "sync + flush MiB",
        "of the limit",
    ]
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
