"""Two store server processes on one PostgreSQL database answer as one server: everything a request can depend
on (stores, memories, cursor keys, admin keys, sessions tokens, revocations) lives in the database.

Requests alternate between the replicas: writes on one, reads, pages and preconditions on the other.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import httpx
import pytest

from conftest import API_HEADERS, RunningStoreServer, StoreApi, launch_store_server
from memsync.api.secret import decode_work_secret
from support.postgres import PostgresServer


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def replicas(postgres: PostgresServer, tmp_path: Path) -> Iterator[tuple[StoreApi, StoreApi]]:
    """Two replicas started at the same moment on a new database: they race to migrate the schema and to
    enter the admin key, and both must come up."""
    url = postgres.new_database("replicas")
    admin_key = "sk-ant-admin-test-replicas-" + secrets.token_urlsafe(12)
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(launch_store_server, tmp_path / name, database_url=url, admin_key=admin_key)
            for name in ("a", "b")
        ]
        wait(futures)
    servers: list[RunningStoreServer] = [f.result() for f in futures if f.exception() is None]
    try:
        for future in futures:
            future.result()  # a replica that failed to start fails the test (after the others are stopped)
        apis = (StoreApi(servers[0]), StoreApi(servers[1]))
        try:
            yield apis
        finally:
            for api in apis:
                api.close()
    finally:
        for server in servers:
            server.stop()


def _wait_for_status(call: object, status: int, timeout_s: float = 15.0) -> httpx.Response:
    """Repeat ``call()`` until it answers ``status`` (a revocation reaches the other replica within its
    credential cache time, a store's change when the database's announcement of it arrives); the last
    response otherwise."""
    assert callable(call)
    deadline = time.monotonic() + timeout_s
    while True:
        resp: httpx.Response = call()
        if resp.status_code == status or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def test_writes_on_one_replica_are_read_paged_and_preconditioned_on_the_other(
    replicas: tuple[StoreApi, StoreApi],
) -> None:
    a, b = replicas
    assert a.server.url != b.server.url
    store = a.new_store("Shared")
    created = [(a if i % 2 else b).create(store, f"/notes/{i:02d}.md", f"note {i}") for i in range(7)]

    # a listing paged across replicas: the cursor one issued is accepted by the other (shared cursor key)
    first = b.admin("GET", f"/v1/memory_stores/{store}/memories", params={"limit": 3})
    assert first.status_code == 200, first.text
    second = a.admin(
        "GET", f"/v1/memory_stores/{store}/memories", params={"limit": 3, "page": first.json()["next_page"]}
    )
    assert second.status_code == 200, second.text
    third = b.admin(
        "GET", f"/v1/memory_stores/{store}/memories", params={"limit": 3, "page": second.json()["next_page"]}
    )
    paths = [m["path"] for page in (first, second, third) for m in page.json()["data"]]
    assert paths == [f"/notes/{i:02d}.md" for i in range(7)]
    assert third.json()["next_page"] is None

    # a precondition read on one replica holds on the other; a stale one is refused there
    target = created[0]["id"]
    url = f"/v1/memory_stores/{store}/memories/{target}"
    seen = a.admin("GET", url).json()["content_sha256"]
    assert seen == _sha("note 0")
    ok = b.admin("POST", url, json={"content": "edited on b", "precondition": {"content_sha256": seen}})
    assert ok.status_code == 200, ok.text
    stale = a.admin("POST", url, json={"content": "edited on a", "precondition": {"content_sha256": seen}})
    assert stale.status_code == 409, stale.text
    assert a.admin("GET", url).json()["content"] == "edited on b"

    # the listing's ETag is the same on both replicas and changes on both after a write on either
    etag_a = a.admin("GET", f"/v1/memory_stores/{store}/memories").headers["etag"]
    etag_b = b.admin("GET", f"/v1/memory_stores/{store}/memories").headers["etag"]
    assert etag_a == etag_b
    not_modified = b.admin("GET", f"/v1/memory_stores/{store}/memories", headers={"if-none-match": etag_a})
    assert not_modified.status_code == 304
    # (b answers the probe from the marker it remembers: it forgets it when the database announces a's
    # commit, a matter of milliseconds)
    a.create(store, "/notes/new.md", "new")
    changed = _wait_for_status(
        lambda: b.admin("GET", f"/v1/memory_stores/{store}/memories", headers={"if-none-match": etag_a}), 200
    )
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag_a


def test_sessions_tokens_and_admin_keys_are_shared_and_revoked_everywhere(
    replicas: tuple[StoreApi, StoreApi],
) -> None:
    a, b = replicas
    store = a.new_store("Tokens")
    minted = a.admin("POST", "/v1/memsync/sessions", json={"resources": [{"memory_store_id": store}]})
    assert minted.status_code == 200, minted.text
    session_id = minted.json()["session"]["id"]
    token = decode_work_secret(minted.json()["work_secret"]).sessions_token
    listing = f"/v1/memory_stores/{store}/memories"
    assert b.bearer(token, "GET", listing).status_code == 200

    deleted = b.admin("DELETE", f"/v1/sessions/{session_id}")
    assert deleted.status_code == 200, deleted.text
    assert b.bearer(token, "GET", listing).status_code == 401  # at once on the replica that revoked
    assert _wait_for_status(lambda: a.bearer(token, "GET", listing), 401).status_code == 401

    # a second admin key made on one replica works on the other; revoked there, it stops on both
    made = a.admin("POST", "/v1/memsync/admin_keys", json={"name": "rotation"})
    assert made.status_code == 200, made.text
    new_key = made.json()["key"]

    def with_new_key(api: StoreApi) -> httpx.Response:
        return api.anon("GET", "/v1/memory_stores", headers={"x-api-key": new_key})

    assert with_new_key(b).status_code == 200
    revoked = b.admin("POST", f"/v1/memsync/admin_keys/{made.json()['id']}/revoke")
    assert revoked.status_code == 200, revoked.text
    assert with_new_key(b).status_code == 401
    assert _wait_for_status(lambda: with_new_key(a), 401).status_code == 401


async def test_interleaved_concurrent_creates_respect_one_cap_and_one_path(
    replicas: tuple[StoreApi, StoreApi],
) -> None:
    """Both replicas race to create the same path: exactly one create wins, across processes."""
    a, b = replicas
    store = a.new_store("Race")
    clients = [
        httpx.AsyncClient(
            base_url=api.server.url,
            headers={**API_HEADERS, "x-api-key": api.server.admin_key},
            params={"beta": "true"},
            timeout=60.0,
        )
        for api in (a, b)
    ]
    try:
        answers = await asyncio.gather(
            *(
                clients[i % 2].post(
                    f"/v1/memory_stores/{store}/memories", json={"path": "/one", "content": str(i)}
                )
                for i in range(12)
            )
        )
    finally:
        for client in clients:
            await client.aclose()
    assert sorted(r.status_code for r in answers) == [200] + [409] * 11
    assert a.paths(store) == ["/one"] == b.paths(store)


async def test_work_items_polled_on_both_replicas_are_each_claimed_once(
    replicas: tuple[StoreApi, StoreApi],
) -> None:
    """Pollers on both replicas race for one environment's queue: every item is handed out exactly once (a
    lease is written with a compare-and-set, so the loser of a race moves on to the next item)."""
    a, b = replicas
    env = a.admin("POST", "/v1/environments", json={"name": "race"}).json()
    key = a.admin("POST", f"/v1/memsync/environments/{env['id']}/keys").json()["key"]
    minted = []
    for _ in range(24):
        resp = (a if len(minted) % 2 else b).admin(
            "POST", "/v1/memsync/sessions", json={"environment_id": env["id"]}
        )
        assert resp.status_code == 200, resp.text
        minted.append(resp.json()["work_id"])
    clients = [
        httpx.AsyncClient(base_url=api.server.url, headers={"authorization": f"Bearer {key}"}, timeout=60.0)
        for api in (a, b)
    ]

    async def poller(client: httpx.AsyncClient) -> list[str]:
        got: list[str] = []
        while True:
            # a reclaim window far longer than the test: an item handed out is never handed out again here
            resp = await client.get(
                f"/v1/environments/{env['id']}/work/poll", params={"reclaim_older_than_ms": 600_000}
            )
            assert resp.status_code == 200, resp.text
            if resp.json() is None:
                return got
            got.append(resp.json()["id"])

    try:
        claims = await asyncio.gather(*(poller(clients[i % 2]) for i in range(8)))
    finally:
        for client in clients:
            await client.aclose()
    claimed = [work_id for batch in claims for work_id in batch]
    assert sorted(claimed) == sorted(minted)  # all of them, none twice
    assert sum(1 for batch in claims if batch) > 1  # the pollers really raced
