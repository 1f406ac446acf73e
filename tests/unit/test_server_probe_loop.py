"""The sidecar's probe decided on the event loop over SQLite (``Database.read_now``), and its way back to the
threadpool: the same answers as the routed listing, whichever path answered."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.concurrency import run_in_threadpool

from memsync.api.secret import decode_work_secret
from memsync.client import StoreClient
from memsync.server.app import create_app
from memsync.server.http import probe
from memsync.server.storage.database import Tx, WouldWait
from memsync.server.storage.sqlite import SqliteDatabase

ADMIN = "sk-test-probe-loop-admin-key"
API = {"anthropic-version": "2023-06-01", "anthropic-beta": "agent-memory-2026-07-22"}


class Hops:
    """Counts the probe's trips to the threadpool."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0

        async def counted(func: Any, *args: Any) -> Any:
            self.count += 1
            return await run_in_threadpool(func, *args)

        monkeypatch.setattr(probe, "run_in_threadpool", counted)


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return create_app(tmp_path / "store.db", ADMIN, "http://t", access_logs=False)


@pytest.fixture
async def http(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=API) as client:
        yield client


async def _store_with_a_memory(http: httpx.AsyncClient) -> str:
    admin = {"x-api-key": ADMIN}
    store = (await http.post("/v1/memory_stores", json={"name": "s"}, headers=admin)).json()["id"]
    created = await http.post(
        f"/v1/memory_stores/{store}/memories", json={"path": "/a.md", "content": "a"}, headers=admin
    )
    assert created.status_code == 200
    return str(store)


async def _token(http: httpx.AsyncClient, store: str) -> tuple[str, str]:
    body = {"resources": [{"type": "memory_store", "memory_store_id": store, "access": "read_write"}]}
    minted = (await http.post("/v1/memsync/sessions", json=body, headers={"x-api-key": ADMIN})).json()
    return minted["session"]["id"], decode_work_secret(minted["work_secret"]).sessions_token


async def _first_page_etag(http: httpx.AsyncClient, store: str) -> str:
    """The ETag of the probe's page, from the routed listing (no If-None-Match)."""
    listing = await http.get(
        f"/v1/memory_stores/{store}/memories", params={"limit": 1}, headers={"x-api-key": ADMIN}
    )
    return str(listing.headers["etag"])


async def _probe(http: httpx.AsyncClient, store: str, token: str, etag: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}", "if-none-match": etag}
    return await http.get(
        f"/v1/memory_stores/{store}/memories", params={"beta": "true", "limit": 1}, headers=headers
    )


async def test_an_unchanged_listing_is_answered_on_the_loop_like_the_route(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _store_with_a_memory(http)
    _, token = await _token(http, store)
    auth = {"authorization": f"Bearer {token}"}
    routed = await http.get(
        f"/v1/memory_stores/{store}/memories", params={"beta": "true", "limit": 1}, headers=auth
    )
    etag = routed.headers["etag"]
    hops = Hops(monkeypatch)

    # the token's first use is looked up on the loop too (not cached yet), then cached
    for _ in range(2):
        answer = await _probe(http, store, token, etag)
        assert answer.status_code == 304 and answer.content == b""
        assert answer.headers["etag"] == etag and answer.headers["cache-control"] == "private, no-cache"
        assert answer.headers["request-id"].startswith("req_")
    assert hops.count == 0

    # a changed store: the page comes from the threadpool path, with the new ETag
    write = await http.post(
        f"/v1/memory_stores/{store}/memories", json={"path": "/b.md", "content": "b"}, headers=auth
    )
    assert write.status_code == 200
    changed = await _probe(http, store, token, etag)
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert [m["path"] for m in changed.json()["data"]] == ["/a.md"]
    assert hops.count == 1
    assert (await _probe(http, store, token, changed.headers["etag"])).status_code == 304
    assert hops.count == 1


async def test_the_store_clients_own_probe_takes_the_loop(
    app: Any, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the sidecar really sends (``StoreClient.probe_memories``), not a hand-written request."""
    store = await _store_with_a_memory(http)
    _, token = await _token(http, store)
    client = StoreClient("http://t", bearer_token=token, transport=httpx.ASGITransport(app=app))
    try:
        first = await client.probe_memories(store, if_none_match=None)
        assert first.etag is not None and not first.not_modified
        hops = Hops(monkeypatch)
        again = await client.probe_memories(store, if_none_match=first.etag)
        assert again.not_modified and again.etag == first.etag
        assert hops.count == 0
    finally:
        await client.aclose()


async def test_the_loop_refuses_what_the_route_refuses(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _store_with_a_memory(http)
    other = await _store_with_a_memory(http)
    session, token = await _token(http, store)
    etag = await _first_page_etag(http, store)
    hops = Hops(monkeypatch)
    assert (await _probe(http, store, token, etag)).status_code == 304

    unattached = await _probe(http, other, token, etag)
    assert unattached.status_code == 404 and unattached.json()["error"]["type"] == "not_found_error"
    unknown = await _probe(http, store, "msenv-not-a-token", etag)
    assert unknown.status_code == 401 and unknown.json()["error"]["type"] == "authentication_error"
    # a revoked token is refused at once in this process, on the loop as on the route
    assert (await http.delete(f"/v1/sessions/{session}", headers={"x-api-key": ADMIN})).status_code == 200
    revoked = await _probe(http, store, token, etag)
    assert revoked.status_code == 401
    assert hops.count == 0


async def test_a_busy_database_takes_the_threadpool(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _store_with_a_memory(http)
    _, token = await _token(http, store)
    etag = await _first_page_etag(http, store)

    def busy(self: SqliteDatabase) -> Any:
        raise WouldWait("database is locked")

    monkeypatch.setattr(SqliteDatabase, "read_now", busy)
    hops = Hops(monkeypatch)
    answer = await _probe(http, store, token, etag)
    assert answer.status_code == 304 and answer.headers["etag"] == etag
    assert hops.count == 1


# --- the storage side ---


def test_read_now_never_waits_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = SqliteDatabase(tmp_path / "store.db")
    try:
        with db.read_now() as tx:
            assert tx.meta("schema_version") == str(db.schema_version)
            conn = tx.conn  # type: ignore[attr-defined]
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
            assert not conn.in_transaction  # each statement its own transaction: nothing left open
        assert conn is not db.conn(), "the loop's connection is its own, with its own busy timeout"

        def locked(*_: Any) -> Any:
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = sqlite3.SQLITE_BUSY
            raise error

        with _patched_rows(monkeypatch, locked), pytest.raises(WouldWait), db.read_now() as tx:
            tx.meta("schema_version")

        def broken(*_: Any) -> Any:
            error = sqlite3.OperationalError("no such table: nowhere")
            error.sqlite_errorcode = sqlite3.SQLITE_ERROR
            raise error

        with _patched_rows(monkeypatch, broken), pytest.raises(sqlite3.OperationalError), db.read_now() as tx:
            tx.meta("schema_version")  # any other error is an error, not a reason to go elsewhere
    finally:
        db.close()


@contextmanager
def _patched_rows(monkeypatch: pytest.MonkeyPatch, rows: Any) -> Iterator[None]:
    with monkeypatch.context() as patch:
        patch.setattr(Tx, "rows", rows)
        from memsync.server.storage.sqlite import SqliteTx

        patch.setattr(SqliteTx, "rows", rows)
        yield


def test_busy_while_opening_the_loops_connection_is_would_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = SqliteDatabase(tmp_path / "store.db")
    try:
        real = SqliteDatabase._connect

        def busy_once(self: SqliteDatabase, busy_timeout_ms: int) -> sqlite3.Connection:
            monkeypatch.setattr(SqliteDatabase, "_connect", real)
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = sqlite3.SQLITE_BUSY
            raise error

        monkeypatch.setattr(SqliteDatabase, "_connect", busy_once)
        with pytest.raises(WouldWait), db.read_now() as tx:
            tx.meta("schema_version")
        with db.read_now() as tx:  # the next request opens it
            assert tx.meta("schema_version") == str(db.schema_version)
    finally:
        db.close()
