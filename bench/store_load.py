"""Capacity benchmark of the store server: many sidecars' no-change sync passes at once.

S simulated sessions, each with 3 stores of N memories attached, run the sync agent's own listing pass
(``agent.listing.list_for_sync``: the conditional probe, else the full listing with the agent's fan-out)
every I seconds with a random phase, against:

- ``sqlite-1``: SQLite, one server process;
- ``sqlite-2w``: SQLite, ``--workers 2``;
- ``pg-1``: PostgreSQL, one server process;
- ``pg-2r``: PostgreSQL, two server replicas on one database (sessions split between them);

each with conditional listing (``cond``: the agent's steady state against this server) and without it
(``full``: the agent forced to list in full, as against a server without ETags). Every session is a closed
loop, like the agent: a pass that is not done by its next tick makes it skip that tick, so an overloaded
server shows as passes/s below the offered rate. Per cell it prints passes/s (offered and achieved), HTTP
requests/s, p50/p99 latency, errors, and CPU milliseconds per request of the server processes and of
PostgreSQL (from /proc), so the CPU bound is visible even when the load generator shares the machine.

The S x 3 attachments map onto ``--stores`` distinct stores (default 30, so 100 sessions share each store):
seeding 3,000 stores of 2,000 memories would take gigabytes and hours, and the server's work per request does
not depend on which store it is (a 304 reads one store row; a full listing reads N/100 pages of that store).
Each distinct store's listing is primed once and its ETag handed to every session attached to it (the ETag
is the same for every caller), standing in for each sidecar's earlier passes.

    .venv/bin/python bench/store_load.py                       # the target: 1,000 x 3 x 2,000 at 15 s
    .venv/bin/python bench/store_load.py --sessions 200 --seconds 20 --cells sqlite-1:cond,pg-2r:cond
    .venv/bin/python bench/store_load.py --overload                # the probe against its floor, then 2x it
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

import store_rate
from _common import format_table, free_port, percentile
from memsync.agent.config import load_config
from memsync.agent.context import ListingCache, StoreContext, SyncContext
from memsync.agent.listing import list_for_sync
from memsync.agent.metrics import Metrics
from memsync.api.secret import decode_work_secret
from memsync.client import StoreClient
from memsync.client.transport import PooledTransport
from memsync.server.access import AccessService
from memsync.server.ids import MEMORY_PREFIX, STORE_PREFIX, VERSION_PREFIX, new_id, now_ts
from memsync.server.storage.backends import open_database
from memsync.server.storage.database import MemoryRow, VersionRow
from support.postgres import PostgresServer, find_pg_bin
from support.server_process import spawn_store_server, stop_process, wait_until_ready

CLK_TCK = os.sysconf("SC_CLK_TCK")
CELLS = ("sqlite-1", "sqlite-2w", "pg-1", "pg-2r")
FILES_PER_FOLDER = 100
DRAIN_S = 5.0  # after the measured window, how long passes in flight may take to finish


# --- seeding (straight into the database, through the server's own storage layer) --------------------------


def seed(database: str | Path, admin_key: str, url: str, *, stores: int, memories: int, sessions: int) -> Any:
    """``stores`` stores of ``memories`` small memories in folders of 100, and ``sessions`` sessions with 3
    of them attached each; the sessions' work secrets and the store of each attachment."""
    db = open_database(database)
    store_ids: list[str] = []
    now = now_ts()
    for s in range(stores):
        store_id = new_id(STORE_PREFIX)
        with db.write() as tx:
            tx.insert_store(store_id=store_id, name=f"load {s}", description="", metadata={}, now=now)
            for i in range(memories):
                path = f"/topic-{i // FILES_PER_FOLDER:03d}/note-{i:05d}.md"
                content = f"memory {i} of store {s}\n"
                row = MemoryRow(
                    new_id(MEMORY_PREFIX), store_id, path, content, _sha(content), len(content),
                    new_id(VERSION_PREFIX), now, now,
                )  # fmt: skip
                tx.insert_memory(row)
                tx.insert_version(
                    VersionRow(0, row.version_id, store_id, row.id, "created", content, row.sha256, row.size,
                               path, now, "api_actor", "bench", None, None, None)
                )  # fmt: skip
                last = row.version_id
            tx.store_changed(store_id, last if memories else "")
        store_ids.append(store_id)
    access = AccessService(db, admin_key, url)
    admin = access.authenticate(admin_key, None)
    minted: list[tuple[str, list[str]]] = []
    for i in range(sessions):
        attached = [store_ids[(3 * i + k) % stores] for k in range(3)]
        body = {
            "resources": [{"memory_store_id": sid, "access": "read_only"} for sid in dict.fromkeys(attached)]
        }
        answer = access.mint_session(admin, json.dumps(body).encode())
        minted.append((answer["work_secret"], list(dict.fromkeys(attached))))
    db.close()
    return minted


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- measuring ---------------------------------------------------------------------------------------------


@dataclass
class Recorder:
    measuring: bool = False
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    lost: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    passes: int = 0
    skipped: int = 0


class TimedTransport(httpx.AsyncBaseTransport):
    """Times every HTTP request a session's client sends (one shared recorder)."""

    def __init__(self, recorder: Recorder) -> None:
        self.inner = PooledTransport(max_connections=8)  # the store client's own (its keep-alive included)
        self.recorder = recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        try:
            response = await self.inner.handle_async_request(request)
            await response.aread()
        except httpx.TransportError:
            if self.recorder.measuring:
                self.recorder.lost += 1  # retried by the client like the agent's; a failed pass counts
            raise
        if self.recorder.measuring:
            self.recorder.latencies_ms.append((time.perf_counter() - started) * 1000)
            self.recorder.statuses[response.status_code] = (
                self.recorder.statuses.get(response.status_code, 0) + 1
            )
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes and their reaped children, from /proc."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / CLK_TCK


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for kid in kids:
        out.extend(tree(int(kid)))
    return out


# --- one cell ----------------------------------------------------------------------------------------------


@dataclass
class Cell:
    name: str
    mode: str
    offered: float
    achieved: float
    rps: float
    p50: float
    p99: float
    errors: int
    server_ms: float
    db_ms: float
    client_ms: float
    lost: int
    server_p99: float  # the upper bound of the bucket holding the servers' own 99th percentile, ms
    server_fast: float  # share of requests the servers answered within 100 ms


@contextmanager
def servers(cell: str, database: str, admin_key: str, work: Path) -> Iterator[tuple[list[str], list[int]]]:
    """The cell's server processes: their URLs and pids."""
    replicas = 2 if cell == "pg-2r" else 1
    extra = ("--workers", "2") if cell == "sqlite-2w" else ()
    procs = []
    urls = []
    env = {**os.environ, "MEMSYNC_ADMIN_KEY": admin_key, "MEMSYNC_LOG_LEVEL": "WARNING"}
    try:
        for r in range(replicas):
            port = free_port()
            log = work / f"server-{cell}-{r}.log"
            proc = spawn_store_server(
                port=port, db_path=database, log_path=log, env=env, extra_args=(*extra, "--db-pool-size", "8")
            )
            procs.append(proc)
            url = f"http://127.0.0.1:{port}"
            wait_until_ready(
                proc, url, timeout_s=120, log_text=lambda log=log: log.read_text(errors="replace")
            )
            urls.append(url)
        time.sleep(1.0 if extra else 0.0)  # workers come up one by one
        yield urls, [p.pid for p in procs]
    finally:
        for proc in procs:
            stop_process(proc)


async def run_cell(
    cell: str, mode: str, *, minted: Any, urls: list[str], pids: list[int], pg_pid: int | None, args: Any
) -> Cell:
    recorder = Recorder()
    metrics = Metrics()
    work = Path(tempfile.mkdtemp(prefix="memsync-load-"))
    syncs: list[list[StoreContext]] = []
    clients: list[StoreClient] = []
    # the baseline a settled sidecar holds: it decides between one listing and the fan-out
    baseline = {f"topic-{i // FILES_PER_FOLDER:03d}/note-{i:05d}.md": "" for i in range(args.memories)}
    for i, (secret, store_ids) in enumerate(minted):
        base = urls[i % len(urls)]
        token = decode_work_secret(secret).sessions_token
        client = StoreClient(
            base, bearer_token=token, transport=TimedTransport(recorder)
        )  # the agent's retries
        clients.append(client)
        config = load_config(
            stores=[
                {
                    "memory_store_id": sid,
                    "name": f"s{k}",
                    "mount_path": f"/mnt/memory/s{k}",
                    "access": "read_only",
                }
                for k, sid in enumerate(store_ids)
            ],
            work_secret=secret,
            test_root=str(work / str(i)),
            state_dir="/var/lib/memsync",
            termination_log="/dev/termination-log",
        )
        shared = SyncContext(config, client, metrics)
        syncs.append([StoreContext(shared, store) for store in config.stores])

    # prime: each distinct store listed once by its first session; the ETag and listing go to every session
    primed: dict[str, ListingCache] = {}
    for session in syncs:
        for sync in session:
            if mode == "full":
                sync.listing = ListingCache(supported=False)
            elif sync.id not in primed:
                await list_for_sync(sync, baseline)
                primed[sync.id] = sync.listing
            else:
                sync.listing = ListingCache(True, primed[sync.id].etag, primed[sync.id].memories)

    # The thousands of simulated sidecars' objects live to the end: out of the collector's way, so its full
    # collections do not pause the load generator (1,000 real sidecars are 1,000 processes, not one heap).
    gc.collect()
    gc.freeze()
    stop_at = time.monotonic() + args.warmup + args.seconds

    async def session_loop(session: list[StoreContext]) -> None:
        next_tick = time.monotonic() + random.uniform(0, args.interval)
        while True:
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            if time.monotonic() >= stop_at:
                return
            try:
                await asyncio.gather(*(list_for_sync(s, baseline) for s in session))
                if recorder.measuring:
                    recorder.passes += len(session)  # one pass per store, as the agent counts them
            except Exception as exc:
                if recorder.measuring:
                    recorder.errors += 1
                    kind = f"{type(exc).__name__}: {str(exc)[:80]}"
                    recorder.kinds[kind] = recorder.kinds.get(kind, 0) + 1
            next_tick += args.interval
            while next_tick < time.monotonic():  # a pass overran: skip the ticks it missed
                next_tick += args.interval
                if recorder.measuring:
                    recorder.skipped += 1

    async def measure() -> tuple[float, float, float, float, dict[float, float]]:
        await asyncio.sleep(args.warmup)
        server_pids = [p for pid in pids for p in tree(pid)]
        db_pids = tree(pg_pid) if pg_pid else []
        h0 = await server_histogram(urls)
        s0, d0, c0, t0 = cpu_seconds(server_pids), cpu_seconds(db_pids), time.process_time(), time.monotonic()
        recorder.measuring = True
        await asyncio.sleep(args.seconds)
        recorder.measuring = False
        server_pids = [p for pid in pids for p in tree(pid)]
        measured = (
            cpu_seconds(server_pids) - s0,
            (cpu_seconds(tree(pg_pid)) - d0) if pg_pid else 0.0,
            time.process_time() - c0,
            time.monotonic() - t0,
        )
        h1 = await server_histogram(urls)
        return (*measured, {le: h1[le] - h0.get(le, 0.0) for le in h1})

    loops = [asyncio.create_task(session_loop(s)) for s in syncs]
    server_cpu, db_cpu, client_cpu, elapsed, histogram = await measure()
    _, pending = await asyncio.wait(loops, timeout=DRAIN_S)  # passes still running then are abandoned
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for client in clients:
        await client.aclose()
    gc.unfreeze()
    for kind, n in sorted(recorder.kinds.items()):
        print(f"  {cell} {mode}: {n} x {kind}", file=sys.stderr)
    if any(status >= 400 for status in recorder.statuses):
        print(f"  {cell} {mode}: statuses {recorder.statuses}", file=sys.stderr)
    lat = sorted(recorder.latencies_ms)
    requests = len(lat)
    bad = sum(n for status, n in recorder.statuses.items() if status >= 400)
    per = 1000 / requests if requests else 0.0
    return Cell(
        name=cell,
        mode=mode,
        offered=sum(len(stores) for _, stores in minted) / args.interval,
        achieved=recorder.passes / elapsed,
        rps=requests / elapsed,
        p50=percentile(lat, 50),
        p99=percentile(lat, 99),
        errors=recorder.errors + bad,
        server_ms=server_cpu * per,
        db_ms=db_cpu * per,
        client_ms=client_cpu * per,
        lost=recorder.lost,
        server_p99=histogram_percentile(histogram, 0.99) * 1000,
        server_fast=histogram.get(0.1, 0.0) / max(histogram.get(float("inf"), 0.0), 1.0),
    )


async def server_histogram(urls: list[str]) -> dict[float, float]:
    """The servers' own request-duration histogram (``/metrics``), every route and replica summed:
    cumulative count per bucket bound in seconds. The servers' time excludes the load generator's queueing."""
    buckets: dict[float, float] = {}
    async with httpx.AsyncClient(timeout=30) as http:
        for url in urls:
            text = await store_rate.fetch_text(http, f"{url}/metrics")
            for family in text_string_to_metric_families(text):
                if family.name != "memsync_store_request_duration_seconds":
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_bucket"):
                        bound = float(sample.labels["le"])
                        buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def histogram_percentile(buckets: dict[float, float], q: float) -> float:
    """The upper bound (seconds) of the bucket that holds the q-quantile of a cumulative histogram."""
    total = buckets.get(float("inf"), 0.0)
    for bound in sorted(buckets):
        if total and buckets[bound] >= q * total:
            return bound
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=2000, help="memories per store")
    parser.add_argument("--stores", type=int, default=30, help="distinct stores the attachments map onto")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between a session's passes")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured time per cell")
    parser.add_argument(
        "--warmup", type=float, default=None, help="unmeasured time first (default: interval)"
    )
    parser.add_argument(
        "--cells",
        default=",".join(f"{c}:{m}" for c in CELLS for m in ("cond", "full")),
        help="comma-separated CELL:MODE, CELL one of " + ", ".join(CELLS) + ", MODE cond or full",
    )
    store_rate.add_arguments(parser)
    args = parser.parse_args()
    if args.floor or args.overload:
        store_rate.main(
            args, "sk-bench-rate-" + os.urandom(8).hex(), Path(tempfile.mkdtemp(prefix="memsync-rate-"))
        )
        return
    if args.warmup is None:
        args.warmup = args.interval
    cells = [tuple(c.split(":")) for c in args.cells.split(",") if c]
    admin_key = "sk-bench-load-" + os.urandom(16).hex()
    work = Path(tempfile.mkdtemp(prefix="memsync-load-"))
    pg: PostgresServer | None = None
    results: list[Cell] = []
    seeded: dict[str, tuple[str, Any]] = {}
    t0 = time.monotonic()
    try:
        for cell, mode in cells:
            backend = "pg" if cell.startswith("pg") else "sqlite"
            if backend not in seeded:
                if backend == "pg":
                    bin_dir = find_pg_bin()
                    if bin_dir is None:
                        print(f"skipping {cell}: PostgreSQL not installed", file=sys.stderr)
                        continue
                    pg = PostgresServer(bin_dir, durable=True).start()
                    database = pg.new_database("load")
                else:
                    database = str(work / "load.db")
                print(f"seeding {backend}: {args.stores} stores x {args.memories} memories, "
                      f"{args.sessions} sessions", file=sys.stderr)  # fmt: skip
                minted = seed(database, admin_key, "http://127.0.0.1", stores=args.stores,
                              memories=args.memories, sessions=args.sessions)  # fmt: skip
                seeded[backend] = (database, minted)
            database, minted = seeded[backend]
            print(f"running {cell} {mode}", file=sys.stderr)
            with servers(cell, database, admin_key, work) as (urls, pids):
                pg_pid = pg.process.pid if backend == "pg" and pg and pg.process else None
                results.append(
                    asyncio.run(
                        run_cell(cell, mode, minted=minted, urls=urls, pids=pids, pg_pid=pg_pid, args=args)
                    )
                )
    finally:
        if pg is not None:
            pg.stop()
    print(
        f"memsync store server capacity — {datetime.now(UTC):%Y-%m-%d}, CPython {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (load generator on the same machine), {args.sessions} sessions x 3 stores x "
        f"{args.memories} memories ({args.stores} distinct stores), pass every {args.interval:g} s, "
        f"{args.seconds:g} s measured per cell, {time.monotonic() - t0:.0f} s in all\n"
    )
    print(
        format_table(
            [
                "server",
                "listing",
                "passes/s offered",
                "passes/s done",
                "req/s",
                "p50 ms",
                "p99 ms",
                "server p99 ms (bucket)",
                "server <= 100 ms",
                "errors",
                "server CPU ms/req",
                "PostgreSQL CPU ms/req",
                "client CPU ms/req",
                "connections lost (retried)",
            ],
            [
                [
                    c.name,
                    c.mode,
                    f"{c.offered:.0f}",
                    f"{c.achieved:.0f}",
                    f"{c.rps:.0f}",
                    f"{c.p50:.1f}",
                    f"{c.p99:.1f}",
                    f"<= {c.server_p99:g}",
                    f"{c.server_fast:.2%}",
                    c.errors,
                    f"{c.server_ms:.2f}",
                    f"{c.db_ms:.2f}" if c.db_ms else "-",
                    f"{c.client_ms:.2f}",
                    c.lost,
                ]
                for c in results
            ],
        )
    )


if __name__ == "__main__":
    main()
