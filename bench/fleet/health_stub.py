"""Every sandbox Pod's sync sidecar ``/status`` in one process, for the fleet benchmark.

The fleet's Pods are simulated (kwok reports them Running); each has its own loopback address as its Pod
IP. This server listens on every address at once (``0.0.0.0`` in a network namespace of its own, see
``bench/operator_fleet.py``) and tells the Pods apart by the address the client dialled (the socket's own
address). It speaks the sidecar's health contract, ``memsync.contracts.health``, which it imports:

- ``GET /status`` answers the address's document at once (200), with ``ETag: tag(document)``;
- ``GET /status?wait=S`` with ``If-None-Match: <tag>`` answers 200 as soon as the document's tag is not
  ``<tag>`` (at once if it already differs), else ``304 Not Modified`` after ``S`` seconds (at most
  ``MAX_WAIT_S``); without ``If-None-Match``, or with an unusable ``wait``, it answers at once.

Every address starts healthy. A store's ``last_success`` moves on at every pass, as a real sidecar's does
(every ``--pass-interval`` seconds, each address at its own offset; 0 keeps it still); the tag leaves it out,
so only a change of health wakes a waiting request. The benchmark turns one address unhealthy and back by a
line on standard input (``unhealthy ADDRESS`` / ``healthy ADDRESS``), answered on standard output with
``ok ...``; ``stats`` answers one line of JSON (requests served by kind, requests waiting now). The first
line written is ``ready PORT``.

    python bench/fleet/health_stub.py [--listen 0.0.0.0] [--port 9477] [--pass-interval 15]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from memsync.agent.config import DEFAULT_INTERVAL_S
from memsync.contracts.health import (
    STATUS_PATH,
    WAIT_PARAM,
    StoreHealth,
    SyncHealth,
    encode_health,
    rfc3339,
    tag,
    wait_seconds,
)
from memsync.controller.sessionmemory.pod import METRICS_PORT

#: The one store every benchmark session syncs (its id in each health document).
STORE_ID: Final = "memstore_fleet"
UNHEALTHY_ERROR: Final = "the store answered 503 (turned unhealthy by the fleet benchmark)"


@dataclass
class Sidecar:
    """One Pod's sidecar as the stub plays it."""

    healthy: bool = True
    failed_at: float | None = None  # when it turned unhealthy: its last success stays before that
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class HealthStub:
    """The documents of every address, and who waits for which to change."""

    def __init__(self, pass_interval: float, started: float | None = None) -> None:
        self.pass_interval = pass_interval
        self.started = time.time() if started is None else started
        self.sidecars: dict[str, Sidecar] = {}
        self.served: collections.Counter[str] = collections.Counter()
        self.waiting = 0

    def sidecar(self, address: str) -> Sidecar:
        found = self.sidecars.get(address)
        if found is None:
            found = self.sidecars[address] = Sidecar()
        return found

    def last_pass(self, address: str, now: float) -> float:
        """When the address's sidecar last ended a pass: every ``pass_interval`` s at its own offset."""
        if self.pass_interval <= 0:
            return self.started
        offset = (zlib.crc32(address.encode()) % 1000) / 1000 * self.pass_interval
        return max(self.started, now - (now - offset) % self.pass_interval)

    def document(self, address: str, now: float | None = None) -> SyncHealth:
        now = time.time() if now is None else now
        side = self.sidecar(address)
        if side.healthy:
            store = StoreHealth(
                healthy=True, outcome="synced", last_success=rfc3339(self.last_pass(address, now))
            )
        else:
            failed_at = side.failed_at if side.failed_at is not None else now
            store = StoreHealth(
                healthy=False,
                outcome="failed",
                last_success=rfc3339(self.last_pass(address, failed_at)),
                last_error=UNHEALTHY_ERROR,
                failing_passes=1,
            )
        return SyncHealth(healthy=side.healthy, stores={STORE_ID: store})

    def set_healthy(self, address: str, healthy: bool) -> None:
        side = self.sidecar(address)
        if side.healthy == healthy:
            return
        side.healthy = healthy
        side.failed_at = None if healthy else time.time()
        side.changed.set()
        side.changed = asyncio.Event()  # the next change wakes the next waiters

    async def status(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        address = str(sockname[0]) if sockname else ""
        health = self.document(address)
        current = tag(health)
        wait = wait_seconds(request.query.get(WAIT_PARAM))
        known = request.headers.get("If-None-Match")
        if wait is not None and known == current:
            changed = self.sidecar(address).changed
            self.waiting += 1
            try:
                await asyncio.wait_for(changed.wait(), wait)
            except TimeoutError:
                self.served["304"] += 1
                return web.Response(status=304, headers={"ETag": current})
            finally:
                self.waiting -= 1
            health = self.document(address)
            current = tag(health)
            self.served["200 after a wait"] += 1
        else:
            self.served["200"] += 1
        return web.Response(
            body=encode_health(health), content_type="application/json", headers={"ETag": current}
        )

    def stats(self) -> dict[str, object]:
        return {"served": dict(self.served), "waiting": self.waiting, "addresses": len(self.sidecars)}


def application(stub: HealthStub) -> web.Application:
    app = web.Application()
    app.router.add_get(STATUS_PATH, stub.status)
    return app


async def start(stub: HealthStub, hosts: Sequence[str], port: int) -> web.AppRunner:
    """Serve ``stub`` on ``hosts`` x ``port``; the caller cleans the runner up."""
    # A client that gives up on a held request ends its handler, so no wait outlives its connection.
    runner = web.AppRunner(application(stub), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, list(hosts), port, backlog=4096, reuse_address=True)
    await site.start()
    return runner


async def control(stub: HealthStub, reader: asyncio.StreamReader) -> None:
    """Commands from standard input until it closes (the benchmark ended or went away)."""
    while line := await reader.readline():
        words = line.decode().split()
        if len(words) == 2 and words[0] in ("healthy", "unhealthy"):
            stub.set_healthy(words[1], words[0] == "healthy")
            print("ok", *words, flush=True)
        elif words == ["stats"]:
            print(json.dumps(stub.stats()), flush=True)
        elif words:
            print("error: expected `healthy ADDRESS`, `unhealthy ADDRESS` or `stats`", flush=True)


async def main_async(hosts: Sequence[str], port: int, pass_interval: float) -> None:
    stub = HealthStub(pass_interval)
    runner = await start(stub, hosts, port)
    try:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        print("ready", port, flush=True)
        await control(stub, reader)
    finally:
        await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--listen", action="append", help="an address to listen on (repeatable; default 0.0.0.0)"
    )
    parser.add_argument("--port", type=int, default=METRICS_PORT)
    parser.add_argument("--pass-interval", type=float, default=DEFAULT_INTERVAL_S)
    args = parser.parse_args()
    asyncio.run(main_async(args.listen or ["0.0.0.0"], args.port, args.pass_interval))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
