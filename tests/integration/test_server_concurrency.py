"""Concurrency against the real server: preconditioned update races, and cursor walks while others write."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer

pytestmark = pytest.mark.both_backends

HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "agent-memory-2026-07-22"}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _client(server: RunningStoreServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url,
        headers={**HEADERS, "x-api-key": server.admin_key},
        params={"beta": "true"},
        timeout=60.0,
    )


async def _new_store(http: httpx.AsyncClient, name: str) -> str:
    resp = await http.post("/v1/memory_stores", json={"name": name})
    assert resp.status_code == 200, resp.text
    store_id: str = resp.json()["id"]
    return store_id


async def test_preconditioned_update_race_has_exactly_one_winner_per_round(
    store_server: RunningStoreServer,
) -> None:
    clients = [_client(store_server) for _ in range(16)]
    try:
        store = await _new_store(clients[0], "race")
        created = await clients[0].post(
            f"/v1/memory_stores/{store}/memories", json={"path": "/hot", "content": "v0"}
        )
        mem_id = created.json()["id"]
        url = f"/v1/memory_stores/{store}/memories/{mem_id}"
        current = "v0"
        winners: list[str] = []
        for rnd in range(8):
            expected = _sha(current)

            async def attempt(
                i: int, http: httpx.AsyncClient, rnd: int = rnd, expected: str = expected
            ) -> Any:
                content = f"round {rnd} by client {i}"
                resp = await http.post(
                    url,
                    json={
                        "content": content,
                        "precondition": {"type": "content_sha256", "content_sha256": expected},
                    },
                )
                return content, resp

            results = await asyncio.gather(*(attempt(i, c) for i, c in enumerate(clients)))
            won = [content for content, resp in results if resp.status_code == 200]
            lost = [resp for _, resp in results if resp.status_code != 200]
            assert len(won) == 1, [r.text for _, r in results]
            assert all(r.status_code == 409 for r in lost)
            assert all(r.json()["error"]["type"] == "memory_precondition_failed_error" for r in lost)
            winners.append(won[0])
            current = won[0]
        final = (await clients[0].get(url)).json()
        assert final["content"] == winners[-1]
        assert final["content_sha256"] == _sha(winners[-1])
        versions = (
            await clients[0].get(
                f"/v1/memory_stores/{store}/memory_versions",
                params={"memory_id": mem_id, "view": "full", "limit": 20},
            )
        ).json()["data"]
        # one version per winner (none lost, none duplicated), newest first, plus the creation
        assert [v["content"] for v in versions] == [*reversed(winners), "v0"]
        assert versions[0]["id"] == final["memory_version_id"]
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def test_concurrent_creates_of_one_path_have_one_winner(store_server: RunningStoreServer) -> None:
    clients = [_client(store_server) for _ in range(12)]
    try:
        store = await _new_store(clients[0], "create-race")
        results = await asyncio.gather(
            *(
                c.post(f"/v1/memory_stores/{store}/memories", json={"path": "/same", "content": f"by {i}"})
                for i, c in enumerate(clients)
            )
        )
        ok = [r for r in results if r.status_code == 200]
        assert len(ok) == 1
        conflicts = [r for r in results if r.status_code == 409]
        assert len(conflicts) == len(clients) - 1
        assert {r.json()["error"]["conflicting_memory_id"] for r in conflicts} == {ok[0].json()["id"]}
        listing = (await clients[0].get(f"/v1/memory_stores/{store}/memories")).json()["data"]
        assert [m["id"] for m in listing] == [ok[0].json()["id"]]
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def _walk(
    http: httpx.AsyncClient, store: str, params: dict[str, Any], pause: asyncio.Event
) -> list[str]:
    seen: list[str] = []
    page: str | None = None
    while True:
        query = dict(params)
        if page:
            query["page"] = page
        resp = await http.get(f"/v1/memory_stores/{store}/memories", params=query)
        assert resp.status_code == 200, resp.text
        seen.extend(item["path"] for item in resp.json()["data"])
        page = resp.json()["next_page"]
        pause.set()  # let the writers know the walk is under way
        await asyncio.sleep(0.01)
        if not page:
            return seen


async def test_cursor_walk_stays_correct_while_others_write(store_server: RunningStoreServer) -> None:
    async with _client(store_server) as http, _client(store_server) as writer_http:
        store = await _new_store(http, "walk-while-writing")
        untouched = [f"/d{i % 7}/keep-{i:03d}" for i in range(140)]
        volatile = [f"/d{i % 7}/gone-{i:03d}" for i in range(60)]
        ids: dict[str, str] = {}

        async def make(path: str) -> None:
            resp = await writer_http.post(
                f"/v1/memory_stores/{store}/memories", json={"path": path, "content": path}
            )
            assert resp.status_code == 200, resp.text
            ids[path] = resp.json()["id"]

        gate = asyncio.Semaphore(16)

        async def bounded(path: str) -> None:
            async with gate:
                await make(path)

        await asyncio.gather(*(bounded(p) for p in untouched + volatile))

        for params in ({"limit": 7}, {"limit": 3, "view": "full"}, {"limit": 5, "path_prefix": "/d3/"}):
            started, stop = asyncio.Event(), asyncio.Event()
            writes_during_walk = 0

            async def writer(
                params: dict[str, Any] = params, started: asyncio.Event = started, stop: asyncio.Event = stop
            ) -> None:
                nonlocal writes_during_walk
                await started.wait()
                n = 0
                while not stop.is_set():
                    n += 1
                    # inserts (before and after the cursor) and deletes of the volatile memories
                    await make(f"/d{n % 7}/new-{params['limit']}-{n:04d}")
                    if volatile:
                        path = volatile.pop()
                        resp = await writer_http.delete(f"/v1/memory_stores/{store}/memories/{ids[path]}")
                        assert resp.status_code == 200
                    writes_during_walk += 1
                    await asyncio.sleep(0)

            task = asyncio.create_task(writer())
            try:
                seen = await _walk(http, store, params, started)
            finally:
                stop.set()
                await task
            assert writes_during_walk > 0
            prefix = params.get("path_prefix", "/")
            expected_kept = [p for p in untouched if p.startswith(prefix)]
            assert len(seen) == len(set(seen)), "a memory was returned twice"
            assert seen == sorted(seen), "the walk left path order"
            missing = set(expected_kept) - set(seen)
            assert not missing, f"untouched memories skipped: {sorted(missing)[:5]}"
