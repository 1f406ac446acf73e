"""Benchmark of the sync agent against the real store server behind a 50 ms latency proxy.

For each N (default 2,000 and 10,000 memories of about 1 kB, spread over top-level folders of 100 files each:
20 folders for 2,000, 100 for 10,000) it measures, with the agent's own code (``commands.mount`` and
``commands.SyncAgent``: what ``memsync mount``, ``sync`` and ``flush --final`` run):

- mount (full-view download into an empty folder);
- the first sync pass after the mount (a new process has a cold hash cache: every file is read once);
- a no-change pass (steady state: must list ceil(N/100) basic pages and hash no file);
- a one-change pass;
- the final shutdown (final sync + push-only flush) with 500 changed files;

each with its HTTP request count (seen by the proxy), files hashed and wall time, beside a floor: the fewest
requests the API allows, and the time of a bare scandir + stat of the tree. The targets of
docs/design.md#performance-targets (N = 2,000) are printed beside the measured times.

    .venv/bin/python bench/sync_agent.py               # N = 2,000 and 10,000
    .venv/bin/python bench/sync_agent.py --sizes 2000  # one size
    .venv/bin/python bench/sync_agent.py --latency     # edit-to-store latency, early sync on and off

``--latency`` runs the sidecar's loop (``memsync.agent.loop.PassLoop``, what ``memsync sync`` runs) on a
store of ``LATENCY_N`` memories at the default interval, with early sync on and then off: after a quiet
period it rewrites one file and polls the store (straight, not through the proxy) every 20 ms until the new
content is there. It prints p50, p90, p99 and the worst of ``--samples`` edits per mode.

The store is seeded straight into a fresh SQLite file through the server's own service layer (no HTTP), then
``memsync store serve`` runs on it as a subprocess; the latency proxy (``bench/latency_proxy.py``) sits in
front. Everything runs on loopback in a temp dir and stops by itself (each step is bounded).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import math
import os
import platform
import pstats
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from memsync.agent import schedule
from memsync.agent.commands import SyncAgent, mount
from memsync.agent.config import DEFAULT_INTERVAL_S, AgentConfig, load_config
from memsync.agent.loop import PassLoop
from memsync.api.models import MemoryStoreResource
from memsync.api.secret import decode_work_secret
from memsync.client import StoreClient
from memsync.server.access import AccessService
from memsync.server.storage.sqlite import SqliteDatabase
from memsync.server.stores.service import StoreService

BENCH_DIR = Path(__file__).resolve().parent
DELAY_S = 0.05
FILES_PER_FOLDER = 100
CHANGED_AT_SHUTDOWN = 500
STEP_TIMEOUT_S = 300.0
RECENT_S = 2.1  # the agent re-hashes files modified within the last 2 s: wait this long for a steady state
LATENCY_N = 200
POLL_S = 0.02
TARGETS_2000 = {"mount": 1.5, "no-change pass": 0.6, "final shutdown (500 changed)": 3.0}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def content_for(i: int, revision: int = 0) -> str:
    """About 1 kB of text, different per memory and per revision."""
    head = f"# memory {i} (revision {revision})\n\n"
    line = f"- fact {i}: the quick brown fox jumps over the lazy dog; revision {revision}.\n"
    body = line * ((1024 - len(head)) // len(line) + 1)
    return (head + body)[:1024]


def layout(n: int) -> list[str]:
    return [f"/topic-{i // FILES_PER_FOLDER:03d}/note-{i:05d}.md" for i in range(n)]


def seed_store(db_path: Path, admin_key: str, n: int) -> str:
    """Create a store with n memories directly through the server's service layer (one transaction each)."""
    db = SqliteDatabase(db_path)
    service = StoreService(db)
    admin = AccessService(db, admin_key, "http://127.0.0.1").authenticate(admin_key, None)
    store = service.create_store(admin, json.dumps({"name": f"Bench {n}"}).encode())
    for i, path in enumerate(layout(n)):
        body = json.dumps({"path": path, "content": content_for(i)}).encode()
        service.create_memory(admin, store["id"], body, None)
    service.db.close()
    store_id: str = store["id"]
    return store_id


class Process:
    """A loopback HTTP server as a subprocess, ready once ``/healthz`` answers 200; stopped with SIGTERM."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *args, "--port", str(self.port)],
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n{self.log.read_text(errors='replace')}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{name} did not start within 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scandir_stat(root: Path) -> tuple[float, int]:
    """Time of a bare recursive scandir + lstat of every entry (the local floor of any change detection)."""
    started = time.perf_counter()
    count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                entry.stat(follow_symlinks=False)
                count += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return time.perf_counter() - started, count


@dataclass
class Row:
    n: int
    step: str
    requests: int
    floor_requests: int
    hashed: int | None
    seconds: float
    floor_seconds: float
    target: float | None
    cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)  # CPU seconds: agent, proxy, store server

    def cells(self) -> list[str]:
        ratio = self.requests / self.floor_requests if self.floor_requests else float("nan")
        target = "-" if self.target is None else f"<= {self.target:g} s"
        verdict = "" if self.target is None else (" (met)" if self.seconds <= self.target else " (MISSED)")
        return [
            f"{self.n:,}",
            self.step,
            f"{self.requests:,}",
            f"{self.floor_requests:,}",
            f"{ratio:.2f}",
            "-" if self.hashed is None else f"{self.hashed:,}",
            f"{self.seconds:.2f} s",
            f"{self.floor_seconds * 1000:.0f} ms",
            target + verdict,
        ]


HEADER = [
    "N",
    "step",
    "requests",
    "floor requests",
    "ratio",
    "files hashed",
    "wall time",
    "scandir+stat",
    "target",
]


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def cpu_table(rows: list[Row]) -> str:
    head = ["N", "step", "wall time", "CPU agent", "CPU latency proxy", "CPU store server"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [f"{r.n:,}", r.step, f"{r.seconds:.2f} s", *(f"{c:.2f} s" for c in r.cpu)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def process_cpu(pid: int) -> float:
    """user + system CPU seconds of a process (Linux /proc), 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Snapshot:
    requests: int
    wall: float
    cpu: tuple[float, float, float]


async def bounded(coro: Any) -> Any:
    return await asyncio.wait_for(coro, timeout=STEP_TIMEOUT_S)


async def bench_size(n: int, work: Path, delay_ms: float, max_connections: int) -> list[Row]:
    admin_key = "sk-bench-admin-" + secrets.token_urlsafe(16)
    db_path = work / f"store-{n}.db"
    started = time.perf_counter()
    store_id = seed_store(db_path, admin_key, n)
    print(f"N={n:,}: seeded {n:,} memories in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    server = Process(
        "store server",
        ["-m", "memsync", "store", "serve", "--db", str(db_path)],
        db_path.with_suffix(".log"),
        {"MEMSYNC_ADMIN_KEY": admin_key, "MEMSYNC_LOG_LEVEL": "WARNING"},
    )
    rows: list[Row] = []
    targets = TARGETS_2000 if n == 2000 else {}
    pages_basic = math.ceil(n / 100)
    pages_full = math.ceil(n / 20)
    try:
        async with StoreClient(server.url, api_key=admin_key) as admin:
            _, secret = await admin.mint_session([MemoryStoreResource(memory_store_id=store_id)])
        token = decode_work_secret(secret).sessions_token
        base = work / f"pod-{n}"
        config = load_config(
            stores=[{"memory_store_id": store_id, "name": "bench", "mount_path": "/mnt/memory/bench"}],
            work_secret=secret,
            test_root=str(base),
            state_dir="/var/lib/memsync",
            termination_log="/dev/termination-log",
            flush_timeout=60,
        )
        root = config.mount_dir(config.stores[0])
        # The proxy runs in its own process: network latency costs the agent no CPU.
        proxy = Process(
            "latency proxy",
            [str(BENCH_DIR / "latency_proxy.py"), "--upstream", server.url, "--delay-ms", str(delay_ms)],
            work / f"proxy-{n}.log",
        )
        # The same pool size as the agent's own client (commands.make_client), unless --max-connections says.
        client = StoreClient(proxy.url, bearer_token=token, max_connections=max_connections)
        paths = layout(n)
        try:

            def snap() -> Snapshot:
                cpu = (time.process_time(), process_cpu(proxy.proc.pid), process_cpu(server.proc.pid))
                return Snapshot(client.request_count, time.perf_counter(), cpu)

            def measure(step: str, floor: int, hashed: int | None, before: Snapshot) -> None:
                after = snap()
                seconds = after.wall - before.wall
                floor_s, _ = scandir_stat(root)
                cpu = (
                    after.cpu[0] - before.cpu[0],
                    after.cpu[1] - before.cpu[1],
                    after.cpu[2] - before.cpu[2],
                )
                requests = after.requests - before.requests
                rows.append(Row(n, step, requests, floor, hashed, seconds, floor_s, targets.get(step), cpu))
                print(f"  {step}: {seconds:.2f} s, {requests} requests", file=sys.stderr)

            before = snap()
            await bounded(mount(config, client=client))
            measure("mount", pages_full, None, before)
            mounted_at = time.monotonic()

            agent = SyncAgent(config, client)  # a new process: the sidecar after the init container
            await asyncio.sleep(max(0.0, RECENT_S - (time.monotonic() - mounted_at)))
            before = snap()
            stats = (await bounded(agent.sync_once()))[store_id]
            measure("first pass (cold hash cache)", pages_basic, stats.hashed, before)

            before = snap()
            stats = (await bounded(agent.sync_once()))[store_id]
            measure("no-change pass", pages_basic, stats.hashed, before)

            (root / paths[n // 2].lstrip("/")).write_text(content_for(n // 2, 1), encoding="utf-8")
            before = snap()
            stats = (await bounded(agent.sync_once()))[store_id]
            measure("one-change pass", pages_basic + 1, stats.hashed, before)

            step = max(1, n // CHANGED_AT_SHUTDOWN)
            changed = list(range(0, n, step))[:CHANGED_AT_SHUTDOWN]
            for i in changed:
                (root / paths[i].lstrip("/")).write_text(content_for(i, 2), encoding="utf-8")
            hashed_before = agent.stores[0].cache.hashes
            before = snap()
            outcome = await bounded(agent.final_shutdown())
            hashed = agent.stores[0].cache.hashes - hashed_before
            summary = outcome.stores[store_id]
            if not outcome.complete or summary["uploaded"] != len(changed):
                raise RuntimeError(f"the final shutdown did not save every change: {outcome.payload()}")
            summary_step = f"final shutdown ({len(changed)} changed)"
            measure(summary_step, pages_basic + len(changed), hashed, before)
        finally:
            await client.aclose()
            proxy.stop()
    finally:
        server.stop()
    return rows


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile of ``values`` (q in 0-100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def edit_latencies(
    config: AgentConfig, client: StoreClient, admin: StoreClient, samples: int, log: str
) -> list[float]:
    """Seconds from a file's write to the store holding it, per sample, with the sidecar's loop running."""
    store_id = config.stores[0].memory_store_id
    root = config.mount_dir(config.stores[0])
    path = layout(LATENCY_N)[0]
    ids = [m.id async for m in admin.list_memories(store_id) if getattr(m, "path", "") == path]
    memory_id = ids[0]
    stop = asyncio.Event()
    loop_task = asyncio.create_task(PassLoop(SyncAgent(config, client), stop).run())
    seconds: list[float] = []
    try:
        for sample in range(samples):
            # A quiet period past the 5 s gap; for the periodic pass, a write at a random phase of it.
            spread = 2 if config.early_sync else config.interval
            quiet = schedule.MIN_GAP_S + 0.5 + random.uniform(0, spread)
            await asyncio.sleep(quiet)
            text = content_for(0, 100 + sample)
            (root / path.lstrip("/")).write_text(text, encoding="utf-8")
            written = time.perf_counter()
            while (await admin.get_memory(store_id, memory_id)).content != text:
                if time.perf_counter() - written > STEP_TIMEOUT_S:
                    raise RuntimeError("the edit never reached the store")
                await asyncio.sleep(POLL_S)
            seconds.append(time.perf_counter() - written)
            print(f"  {log} #{sample + 1}: {seconds[-1]:.2f} s", file=sys.stderr)
    finally:
        stop.set()
        await loop_task
    return seconds


async def bench_latency(work: Path, delay_ms: float, samples: int) -> list[tuple[str, list[float]]]:
    admin_key = "sk-bench-admin-" + secrets.token_urlsafe(16)
    db_path = work / "store-latency.db"
    store_id = seed_store(db_path, admin_key, LATENCY_N)
    server = Process(
        "store server",
        ["-m", "memsync", "store", "serve", "--db", str(db_path)],
        db_path.with_suffix(".log"),
        {"MEMSYNC_ADMIN_KEY": admin_key, "MEMSYNC_LOG_LEVEL": "WARNING"},
    )
    results: list[tuple[str, list[float]]] = []
    try:
        async with StoreClient(server.url, api_key=admin_key) as admin:
            _, secret = await admin.mint_session([MemoryStoreResource(memory_store_id=store_id)])
            token = decode_work_secret(secret).sessions_token
            proxy = Process(
                "latency proxy",
                [str(BENCH_DIR / "latency_proxy.py"), "--upstream", server.url, "--delay-ms", str(delay_ms)],
                work / "proxy-latency.log",
            )
            try:
                for early in (True, False):
                    base = work / f"pod-latency-{early}"
                    config = load_config(
                        stores=[
                            {"memory_store_id": store_id, "name": "bench", "mount_path": "/mnt/memory/b"}
                        ],
                        work_secret=secret,
                        test_root=str(base),
                        early_sync=early,
                    )
                    async with StoreClient(proxy.url, bearer_token=token, max_connections=64) as client:
                        await bounded(mount(config, client=client))
                        label = "on" if early else "off"
                        results.append(
                            (
                                label,
                                await edit_latencies(config, client, admin, samples, f"early sync {label}"),
                            )
                        )
            finally:
                proxy.stop()
    finally:
        server.stop()
    return results


def latency_table(results: list[tuple[str, list[float]]], interval: float) -> str:
    head = ["early sync", "interval", "edits", "p50", "p90", "p99", "worst"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for label, values in results:
        cells = [label, f"{interval:g} s", str(len(values))]
        cells += [f"{percentile(values, q):.2f} s" for q in (50, 90, 99)] + [f"{max(values):.2f} s"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="2000,10000", help="comma-separated memory counts (default 2000,10000)"
    )
    parser.add_argument(
        "--delay-ms", type=float, default=DELAY_S * 1000, help="latency added per request (default 50)"
    )
    parser.add_argument(
        "--max-connections", type=int, default=64, help="HTTP pool size of the agent's client (agent uses 64)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the run; print the top functions")
    parser.add_argument(
        "--latency", action="store_true", help="measure the edit-to-store latency, early sync on and off"
    )
    parser.add_argument("--samples", type=int, default=20, help="edits per mode with --latency (default 20)")
    args = parser.parse_args()
    if args.latency:
        work = Path(tempfile.mkdtemp(prefix="memsync-bench-"))
        try:
            results = asyncio.run(bench_latency(work, args.delay_ms, args.samples))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(
            f"\nedit-to-store latency: {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs; {LATENCY_N} "
            f"memories, {args.delay_ms:.0f} ms per request, the default interval; one file rewritten after a "
            "quiet period\n"
        )
        print(latency_table(results, DEFAULT_INTERVAL_S))
        return
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    work = Path(tempfile.mkdtemp(prefix="memsync-bench-"))
    rows: list[Row] = []
    try:
        for n in sizes:
            if args.profile:
                profiler = cProfile.Profile()
                rows.extend(
                    profiler.runcall(asyncio.run, bench_size(n, work, args.delay_ms, args.max_connections))
                )
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
            else:
                rows.extend(asyncio.run(bench_size(n, work, args.delay_ms, args.max_connections)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpus = os.cpu_count() or 0
    folders = ", ".join(f"{math.ceil(n / FILES_PER_FOLDER)} folders for {n:,}" for n in sizes)
    print(
        f"\nsync agent benchmark: {time.strftime('%Y-%m-%d')}, {platform.system()} {platform.machine()}, "
        f"{cpus} CPUs, Python {platform.python_version()}; store server (SQLite) behind a loopback proxy "
        f"(own process) adding {args.delay_ms:.0f} ms per request; memories of ~1 kB in top-level folders "
        f"of {FILES_PER_FOLDER} ({folders})\n"
    )
    print(table(rows))
    print(f"\nwhere the time goes (CPU seconds of each process during the step; {cpus} cores shared):\n")
    print(cpu_table(rows))
    print(
        "\nfloor requests: mount ceil(N/20) full-view pages; passes ceil(N/100) basic-view pages (+1 update "
        "for one change); final shutdown ceil(N/100) pages + one update per changed file. The first pass "
        "after a mount runs in a new process (the sidecar) whose hash cache is empty, so it reads every file "
        "once."
    )


if __name__ == "__main__":
    main()
