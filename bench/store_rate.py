"""The store server's request rate against a floor, and its answer to overload.

``store_load.py --floor`` (and ``--overload``) run this. One server process (and ``--workers 2``) over SQLite
and over PostgreSQL is driven over keep-alive connections by a minimal asyncio HTTP/1.1 client (a few
microseconds per request, so the load generator takes little of the two cores it shares with the server):

- **floor**: the most requests per second the server answers on ``/healthz`` (answered by the outermost
  middleware: no credential, no router, no database), closed loop over 32 connections; the same for the
  sidecar's conditional probe (``view=basic&limit=1`` + ``If-None-Match``, answered 304), and the probe's
  rate as a fraction of the floor;
- **overload** (``--overload``): the probe offered open loop at twice the probe's measured saturating rate,
  every request sent on its schedule whatever came back, by ``bench/loadgen`` (Go, built here, one core;
  ``--connections`` keep-alive connections) or, without a Go toolchain or with ``--generator python``, by
  the asyncio client over 400 (which falls behind beyond a few thousand requests a second). Reported: the
  admitted (304) requests' p50/p99 from their scheduled send time, how many were shed (503/429) and how
  fast that answer came, every other outcome (which must be 0), how many found every connection busy (not
  sent), the same latencies for what was scheduled after the first second (the steady state, without
  the onset: every connection sending at once into a server at rest, whose first refusals come only after
  the turn of its loop that reads them all), and how late the generator itself sent (p99: its own share
  of the latencies, when it runs short of CPU on the cores it shares with the server). With
  ``bench/loadgen`` each cell is offered that load twice: by clients that ignore ``Retry-After`` (the worst
  case: every refusal is followed by the next request at once) and by clients that honour it as memsync's
  store client does (a connection refused with ``Retry-After`` sends nothing more for that long plus up to
  half again; what was scheduled meanwhile goes to the other connections, or is not sent).

Run with the server's defaults (``--max-in-flight 32``, ``--max-loop-lag 0.05``) unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from _common import format_table, free_port, percentile
from memsync.api.secret import decode_work_secret
from support.postgres import PostgresServer, find_pg_bin
from support.server_process import spawn_store_server, stop_process, wait_until_ready

API = {"anthropic-version": "2023-06-01", "anthropic-beta": "agent-memory-2026-07-22"}
CONNECTIONS = 32
TOKENS = 8  # distinct sessions tokens the probes are spread over (one credential holds half the slots)
OPEN_LOOP_CONNECTIONS = 400  # the Python generator's pool (what one asyncio process keeps up with)
COMPILED_OPEN_LOOP_CONNECTIONS = 1000  # bench/loadgen's default (--connections): about one per session
#: The overload's onset: latencies are also reported for what was scheduled after it (the steady state)
ONSET_S = 1.0


# --- a minimal HTTP/1.1 keep-alive client ---


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(self, raw: bytes) -> int:
        """Send one request, read its whole answer; the status."""
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if length:
            await self.reader.readexactly(length)
        return int(head[9:12])

    def close(self) -> None:
        self.writer.close()


async def fetch_text(http: httpx.AsyncClient, url: str, attempts: int = 3) -> str:
    """GET ``url``'s text; a connection the busy server dropped is tried again (a scrape, not the load)."""
    for attempt in range(attempts):
        try:
            return (await http.get(url)).raise_for_status().text
        except httpx.TransportError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(1.0)
    raise AssertionError("unreachable")


def raw_get(port: int, target: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {target} HTTP/1.1", f"host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --- the server and what it serves ---


@dataclass
class Target:
    port: int
    floor: bytes
    probes: list[bytes]  # one per token, the same store and ETag


def prepare(port: int, admin_key: str) -> Target:
    """A store with 20 memories, sessions tokens with it attached, and the probe each would send."""
    base = f"http://127.0.0.1:{port}"
    admin = {**API, "x-api-key": admin_key}
    with httpx.Client(base_url=base, headers=admin, params={"beta": "true"}, timeout=30) as http:
        store = http.post("/v1/memory_stores", json={"name": "rate"}).raise_for_status().json()["id"]
        for i in range(20):
            http.post(f"/v1/memory_stores/{store}/memories", json={"path": f"/n{i}.md", "content": "x"})
        listing = f"/v1/memory_stores/{store}/memories"
        # the probe exactly as the sidecar's store client sends it (StoreClient.probe_memories)
        etag = http.get(listing, params={"view": "basic", "limit": 1}).raise_for_status().headers["etag"]
        body = {"resources": [{"type": "memory_store", "memory_store_id": store, "access": "read_only"}]}
        tokens = [
            decode_work_secret(
                http.post("/v1/memsync/sessions", json=body).raise_for_status().json()["work_secret"]
            ).sessions_token
            for _ in range(TOKENS)
        ]
    target = f"{listing}?beta=true&view=basic&limit=1"
    probes = [
        raw_get(port, target, {**API, "authorization": f"Bearer {t}", "if-none-match": etag}) for t in tokens
    ]
    return Target(port, raw_get(port, "/healthz", {}), probes)


@contextmanager
def server(database: str, admin_key: str, log: Path, workers: int, extra: tuple[str, ...]) -> Iterator[int]:
    port = free_port()
    env = {**os.environ, "MEMSYNC_ADMIN_KEY": admin_key, "MEMSYNC_LOG_LEVEL": "WARNING"}
    args = ("--no-access-log", "--workers", str(workers), *extra)
    proc = spawn_store_server(port=port, db_path=database, log_path=log, env=env, extra_args=args)
    try:
        wait_until_ready(proc, f"http://127.0.0.1:{port}", timeout_s=120, log_text=log.read_text)
        time.sleep(1.0 if workers > 1 else 0.0)  # workers come up one by one
        yield port
    finally:
        stop_process(proc)


# --- closed loop: the most the server answers ---


async def closed_loop(port: int, requests: list[bytes], seconds: float, ok: int) -> float:
    """Answers with status ``ok`` per second, ``CONNECTIONS`` connections sending back to back."""
    conns = [await Connection.open(port) for _ in range(CONNECTIONS)]
    done = 0
    stop_at = time.monotonic() + seconds

    async def loop(i: int) -> None:
        nonlocal done
        raw = requests[i % len(requests)]
        while time.monotonic() < stop_at:
            if await conns[i].request(raw) == ok:
                done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(i) for i in range(CONNECTIONS)))
    elapsed = time.monotonic() - started
    for conn in conns:
        conn.close()
    return done / elapsed


# --- open loop: offered at a fixed rate ---


@dataclass
class Overload:
    offered: float
    connections: int
    honours_retry_after: bool = False  # the clients wait a refusal's Retry-After before they send again
    sent: int = 0
    admitted_ms: list[float] = field(default_factory=list)
    shed_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    failures: int = 0  # no answer at all, or an answer other than 304/429/503
    unsent: int = 0  # the load generator's own limit (every connection busy): not sent, not the server's
    send_lag_ms: list[float] = field(default_factory=list)  # the generator's own delay: sent after schedule
    # the same latencies for the requests scheduled from ONSET_S on
    admitted_steady_ms: list[float] = field(default_factory=list)
    shed_steady_ms: list[float] = field(default_factory=list)

    def answered(self, status: int, ms: float, at_s: float) -> None:
        """Count an answer that came ``ms`` after its request's scheduled send, ``at_s`` into the run."""
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status == 304:
            kept = (self.admitted_ms, self.admitted_steady_ms)
        elif status in (429, 503):
            kept = (self.shed_ms, self.shed_steady_ms)
        else:
            self.failures += 1
            return
        kept[0].append(ms)
        if at_s >= ONSET_S:
            kept[1].append(ms)


async def open_loop(port: int, requests: list[bytes], rate: float, seconds: float) -> Overload:
    """``rate`` requests per second for ``seconds``, each on an idle keep-alive connection of a pool opened
    beforehand (as a fleet of sidecars holds its connections): connecting is not part of what is timed, and a
    request that finds every connection busy is not sent but counted (the generator's own limit)."""
    result = Overload(rate, OPEN_LOOP_CONNECTIONS)
    idle: list[Connection] = [await Connection.open(port) for _ in range(OPEN_LOOP_CONNECTIONS)]
    tasks: set[asyncio.Task[None]] = set()

    async def one(conn: Connection, raw: bytes, scheduled: float) -> None:
        result.send_lag_ms.append((time.monotonic() - scheduled) * 1000)
        try:
            try:
                status = await conn.request(raw)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise
                # the server closed a keep-alive connection that sat idle past its timeout: as any HTTP
                # client does, send again on a new one (a request refused this way was never read)
                conn.close()
                conn = await Connection.open(port)
                status = await conn.request(raw)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            result.failures += 1
            result.statuses[0] = result.statuses.get(0, 0) + 1  # 0: no answer
            print(f"  no answer: {type(exc).__name__}: {exc}", file=sys.stderr)
            conn.close()
            idle.append(await Connection.open(port))
            return
        result.answered(status, (time.monotonic() - scheduled) * 1000, scheduled - start)
        idle.append(conn)

    start = time.monotonic()
    for i in range(int(rate * seconds)):
        scheduled = start + i / rate
        # behind schedule the loop still yields, so the requests already sent make progress
        await asyncio.sleep(max(0.0, scheduled - time.monotonic()))
        if not idle:
            result.unsent += 1  # the load generator's own limit: counted, never hidden
            continue
        task = asyncio.create_task(one(idle.pop(), requests[i % len(requests)], scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        result.sent += 1
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    for conn in idle:
        conn.close()
    return result


# --- open loop from a compiled generator ---


def build_loadgen(work: Path) -> Path | None:
    """``bench/loadgen`` (Go, standard library only) built into ``work``; None without a Go toolchain."""
    go = shutil.which("go")
    if go is None:
        return None
    binary = work / "loadgen"
    source = Path(__file__).resolve().parent / "loadgen"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=source, check=True, timeout=600)
    return binary


def open_loop_compiled(
    binary: Path,
    port: int,
    requests: list[bytes],
    rate: float,
    seconds: float,
    *,
    connections: int,
    warmup: bytes,
    honour_retry_after: bool = False,
) -> Overload:
    """``open_loop``'s measurement by ``bench/loadgen``: the same pool, schedule and outcomes, at a few
    microseconds of CPU per request, so it can offer what one Python process on a shared core cannot.
    Each connection first sends ``warmup`` and reads its answer before the schedule starts, so every
    connection has been accepted by the server when the load begins. ``honour_retry_after``: a connection
    refused with ``Retry-After`` waits as memsync's store client does before it is used again."""
    config = {
        "addr": f"127.0.0.1:{port}",
        "rate": rate,
        "seconds": seconds,
        "connections": connections,
        "requests": [raw.decode() for raw in requests],
        "warmup": warmup.decode(),
        "honour_retry_after": honour_retry_after,
    }
    env = {**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "1")}  # one core, as the Python one
    done = subprocess.run(
        [str(binary)],
        input=json.dumps(config),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    out = json.loads(done.stdout)
    result = Overload(
        rate,
        connections,
        honour_retry_after,
        sent=out["sent"],
        unsent=out["unsent"],
        send_lag_ms=out["send_lag_ms"],
    )
    for error in out["errors"]:
        print(f"  no answer: {error}", file=sys.stderr)
    result.failures = out["failures"]
    if result.failures:
        result.statuses[0] = result.failures  # 0: no answer
    for status, ms, at_s in zip(out["statuses"], out["millis"], out["at"], strict=True):
        result.answered(status, ms, at_s)
    return result


# --- the cells ---


@dataclass
class Row:
    cell: str
    floor_rps: float
    probe_rps: float
    overloads: list[Overload] = field(default_factory=list)  # by clients that ignore, then honour Retry-After


def run(
    cells: list[tuple[str, str, int]], admin_key: str, work: Path, args: Any, loadgen: Path | None
) -> list[Row]:
    """``cells``: (name, database, workers); the overload offered by ``loadgen`` if built, else in Python."""
    rows = []
    extra = ("--max-in-flight", str(args.max_in_flight)) if args.max_in_flight is not None else ()
    if args.max_loop_lag is not None:
        extra += ("--max-loop-lag", str(args.max_loop_lag))
    for name, database, workers in cells:
        with server(database, admin_key, work / f"rate-{name}.log", workers, extra) as port:
            target = prepare(port, admin_key)
            # warm up both paths (credential caches, connections), then measure them back to back
            asyncio.run(closed_loop(port, target.probes, 2.0, 304))
            floor = asyncio.run(closed_loop(port, [target.floor], args.rate_seconds, 200))
            probe = asyncio.run(closed_loop(port, target.probes, args.rate_seconds, 304))
            row = Row(name, floor, probe)
            if args.overload and loadgen is not None:
                for honour in (False, True):
                    if honour:
                        time.sleep(1)  # the server at rest again after the first run
                    row.overloads.append(
                        open_loop_compiled(
                            loadgen,
                            port,
                            target.probes,
                            2 * probe,
                            args.rate_seconds,
                            connections=args.connections,
                            warmup=target.floor,
                            honour_retry_after=honour,
                        )
                    )
            elif args.overload:
                row.overloads.append(
                    asyncio.run(open_loop(port, target.probes, 2 * probe, args.rate_seconds))
                )
            for o in row.overloads:
                print(f"  {name} overload: statuses {o.statuses}", file=sys.stderr)
            rows.append(row)
    return rows


def print_tables(rows: list[Row]) -> None:
    print(
        format_table(
            ["server", "floor req/s (/healthz)", "probe req/s (304)", "probe / floor"],
            [
                [r.cell, f"{r.floor_rps:.0f}", f"{r.probe_rps:.0f}", f"{r.probe_rps / r.floor_rps:.0%}"]
                for r in rows
            ],
        )
    )
    over = [(r, o) for r in rows for o in r.overloads]
    if not over:
        return
    print()
    table = []

    def ms(values: list[float], p: float) -> str:
        return f"{percentile(sorted(values), p):.1f}" if values else "-"

    for r, o in over:
        table.append(
            [
                r.cell,
                "honour" if o.honours_retry_after else "ignore",
                f"{o.offered:.0f}",
                o.connections,
                o.sent,
                len(o.admitted_ms),
                ms(o.admitted_ms, 50),
                ms(o.admitted_ms, 99),
                ms(o.admitted_steady_ms, 99),
                len(o.shed_ms),
                ms(o.shed_ms, 50),
                ms(o.shed_ms, 99),
                ms(o.shed_steady_ms, 50),
                ms(o.shed_steady_ms, 99),
                o.failures,
                o.unsent,
                ms(o.send_lag_ms, 99),
            ]
        )
    print(
        format_table(
            [
                "server",
                "clients: Retry-After",
                "offered req/s (2 x probe)",
                "connections",
                "sent",
                "admitted (304)",
                "admitted p50 ms",
                "admitted p99 ms",
                f"admitted p99 ms after {ONSET_S:g} s",
                "shed (503/429)",
                "shed p50 ms",
                "shed p99 ms",
                f"shed p50 ms after {ONSET_S:g} s",
                f"shed p99 ms after {ONSET_S:g} s",
                "other failures",
                "not sent (every connection busy or waiting)",
                "generator's send lag p99 ms",
            ],
            table,
        )
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--floor", action="store_true", help="the probe's rate against /healthz")
    parser.add_argument("--overload", action="store_true", help="--floor, then the probe at twice its rate")
    parser.add_argument("--rate-seconds", type=float, default=5.0, help="seconds per --floor measurement")
    parser.add_argument("--max-in-flight", type=int, default=None, help="--floor/--overload: the bound")
    parser.add_argument(
        "--max-loop-lag", type=float, default=None, help="--floor/--overload: the lag bound (seconds)"
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=COMPILED_OPEN_LOOP_CONNECTIONS,
        help="--overload with bench/loadgen: keep-alive connections the requests are offered on",
    )
    parser.add_argument(
        "--generator",
        choices=("go", "python"),
        default="go",
        help="--overload: who offers it (go: bench/loadgen, built here; python without a Go toolchain)",
    )
    parser.add_argument(
        "--servers", default=None, help="--floor/--overload: only these, comma-separated (sqlite-1,pg-2w)"
    )


def main(args: Any, admin_key: str, work: Path) -> None:
    """The floor table (and the overload table) on SQLite and PostgreSQL, one process and two workers."""
    cells: list[tuple[str, str, int]] = [
        ("sqlite-1", str(work / "rate-1.db"), 1),
        ("sqlite-2w", str(work / "rate-2w.db"), 2),
    ]
    pg: PostgresServer | None = None
    bin_dir = find_pg_bin()
    if bin_dir is None:
        print("skipping PostgreSQL: not installed", file=sys.stderr)
    else:
        pg = PostgresServer(bin_dir, durable=True).start()
        cells += [("pg-1", pg.new_database("rate1"), 1), ("pg-2w", pg.new_database("rate2w"), 2)]
    if args.servers:
        cells = [cell for cell in cells if cell[0] in args.servers.split(",")]
    loadgen = None
    if args.overload and args.generator == "go":
        loadgen = build_loadgen(work)
        if loadgen is None:
            print("no Go toolchain: the overload is offered by the Python generator", file=sys.stderr)
    started, load_before = time.monotonic(), f"{os.getloadavg()[0]:.2f}"
    try:
        rows = run(cells, admin_key, work, args, loadgen)
    finally:
        if pg is not None:
            pg.stop()
    bound = args.max_in_flight if args.max_in_flight is not None else "default (32)"
    generator = ""
    if args.overload:
        generator = "overload offered by " + ("bench/loadgen (Go, one core), " if loadgen else "Python, ")
    lag = f"{args.max_loop_lag:g} s" if args.max_loop_lag is not None else "default (0.05 s)"
    print(
        f"memsync store server rate against its floor — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, CPython "
        f"{platform.python_version()}, {os.cpu_count()} CPUs (load generator on the same machine), "
        f"{CONNECTIONS} connections, {args.rate_seconds:g} s per measurement, --max-in-flight {bound}, "
        f"--max-loop-lag {lag}, {generator}"
        f"{time.monotonic() - started:.0f} s in all; load average before/after: {load_before} / "
        f"{os.getloadavg()[0]:.2f}\n"
    )
    print_tables(rows)
