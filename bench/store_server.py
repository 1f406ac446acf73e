"""Store server benchmark: requests/second and latency of the main calls at 1, 16 and 64 concurrent clients.

Starts the real server (``python -m memsync store serve``) on loopback with a fresh SQLite file, seeds one
store with 1,000 memories of about 1 kB, then drives each operation for a fixed time per cell with raw httpx
(so the numbers are the server's, not a client library's) and prints a Markdown table. It stops by itself.

    python bench/store_server.py [--seconds 3] [--memories 1000]

Operations:
- ``list page``: one page of the 1,000-memory store, ``view=basic&limit=100``
- ``list walk``: pages of 100 (basic view) following ``next_page`` through the whole store and starting over,
  so most pages are resumed from a cursor (one request = one page)
- ``retrieve``: one memory by id, ``view=full``
- ``update``: a preconditioned content update (each client edits its own memory, so every call succeeds)
- ``create``: a new memory at a fresh path (into a separate store per concurrency level)

Each cell runs for ``--seconds``; calls still in flight one second after that are cancelled and not counted
(so a cell never takes more than seconds + 1). Client and server share the machine, so at high concurrency the
client's own CPU use is part of the result.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import StoreServerProcess, format_table, percentile

CONCURRENCY = (1, 16, 64)
CONTENT = ("memsync benchmark line of text. " * 32)[:1000]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Cell:
    operation: str
    clients: int
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


Op = Callable[[httpx.AsyncClient, int, int], Awaitable[None]]  # (http, worker index, iteration)


async def run_cell(http: httpx.AsyncClient, name: str, clients: int, seconds: float, op: Op) -> Cell:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        nonlocal errors
        i = 0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                await op(http, index, i)
            except (httpx.HTTPError, AssertionError):
                errors += 1
            latencies.append((time.perf_counter() - t0) * 1000)
            i += 1

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker(i)) for i in range(clients)]
    # hard bound: whatever is still in flight a second after the deadline is cancelled and not counted
    _, pending = await asyncio.wait(tasks, timeout=seconds + 1.0)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    elapsed = min(time.perf_counter() - start, seconds + 1.0)
    latencies.sort()
    return Cell(name, clients, len(latencies) - errors, errors, elapsed, latencies)


def _ok(resp: httpx.Response) -> httpx.Response:
    if resp.status_code != 200:
        raise AssertionError(f"{resp.status_code}: {resp.text[:200]}")
    return resp


async def seed(http: httpx.AsyncClient, name: str, count: int) -> tuple[str, list[str]]:
    store = _ok(await http.post("/v1/memory_stores", json={"name": name})).json()["id"]
    gate = asyncio.Semaphore(16)
    ids: list[str] = []

    async def one(i: int) -> None:
        async with gate:
            resp = _ok(
                await http.post(
                    f"/v1/memory_stores/{store}/memories",
                    json={"path": f"/seed/d{i % 10}/m{i:05d}.md", "content": CONTENT},
                )
            )
            ids.append(resp.json()["id"])

    await asyncio.gather(*(one(i) for i in range(count)))
    return store, ids


async def main(seconds: float, memories: int) -> int:
    with StoreServerProcess() as server:
        limits = httpx.Limits(max_connections=max(CONCURRENCY), max_keepalive_connections=max(CONCURRENCY))
        async with httpx.AsyncClient(
            base_url=server.url,
            headers=server.admin_headers(),
            params={"beta": "true"},
            limits=limits,
            timeout=60.0,
        ) as http:
            t0 = time.perf_counter()
            store, ids = await seed(http, "bench", memories)
            seed_s = time.perf_counter() - t0
            base = f"/v1/memory_stores/{store}/memories"

            async def list_page(h: httpx.AsyncClient, w: int, i: int) -> None:
                body = _ok(await h.get(base, params={"view": "basic", "limit": 100})).json()
                assert len(body["data"]) == 100

            cursors: dict[int, str | None] = {}

            async def list_walk(h: httpx.AsyncClient, w: int, i: int) -> None:
                # one page per call; each client follows its own cursor through the store, then starts over
                params: dict[str, str | int] = {"view": "basic", "limit": 100}
                if cursors.get(w):
                    params["page"] = cursors[w] or ""
                body = _ok(await h.get(base, params=params)).json()
                assert body["data"]
                cursors[w] = body["next_page"]

            async def retrieve(h: httpx.AsyncClient, w: int, i: int) -> None:
                _ok(await h.get(f"{base}/{ids[(w * 7919 + i) % len(ids)]}", params={"view": "full"}))

            shas: dict[int, str] = {}

            async def update(h: httpx.AsyncClient, w: int, i: int) -> None:
                mem_id = ids[w]
                expected = shas.get(w, _sha(CONTENT))
                content = f"{CONTENT[:980]} w{w} i{i}"
                _ok(
                    await h.post(
                        f"{base}/{mem_id}",
                        json={
                            "content": content,
                            "precondition": {"type": "content_sha256", "content_sha256": expected},
                        },
                    )
                )
                shas[w] = _sha(content)

            cells: list[Cell] = []
            for clients in CONCURRENCY:
                create_store = _ok(
                    await http.post("/v1/memory_stores", json={"name": f"create-{clients}"})
                ).json()["id"]

                async def create(
                    h: httpx.AsyncClient, w: int, i: int, create_store: str = create_store
                ) -> None:
                    _ok(
                        await h.post(
                            f"/v1/memory_stores/{create_store}/memories",
                            json={"path": f"/new/w{w:02d}/m{i:06d}.md", "content": CONTENT},
                        )
                    )

                for name, op in (
                    ("list page (basic, limit=100)", list_page),
                    ("list walk (basic, limit=100, following next_page)", list_walk),
                    ("retrieve (full)", retrieve),
                    ("preconditioned update", update),
                    ("create", create),
                ):
                    cell = await run_cell(http, name, clients, seconds, op)
                    cells.append(cell)
                    print(f"  {name:<45} clients={clients:<3} {cell.rps:8.1f} req/s", file=sys.stderr)

    order = {name: i for i, name in enumerate(dict.fromkeys(c.operation for c in cells))}
    cells.sort(key=lambda c: (order[c.operation], c.clients))
    rows = [
        (
            c.operation,
            c.clients,
            c.requests,
            f"{c.rps:.0f}",
            f"{percentile(c.latencies_ms, 50):.1f}",
            f"{percentile(c.latencies_ms, 99):.1f}",
            c.errors,
        )
        for c in cells
    ]
    print(
        f"memsync store server benchmark — {datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
        f"{platform.python_version()}, {seconds:g} s per cell, "
        f"seeded {memories} memories of ~1 kB in {seed_s:.1f} s"
    )
    print()
    print(format_table(("operation", "clients", "requests", "req/s", "p50 ms", "p99 ms", "errors"), rows))
    return 1 if any(c.errors for c in cells) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each cell (default 3)")
    parser.add_argument("--memories", type=int, default=1000, help="memories to seed (default 1000)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.seconds, args.memories)))
