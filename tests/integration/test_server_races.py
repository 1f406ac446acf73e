"""Check-then-write races of the access service, forced into their worst interleaving on both backends.

The first call is paused inside its transaction just before it ends, after every check and write it
makes; the second call runs meanwhile. The first is let go once the second has finished or (a paused write)
is waiting for a lock the first holds (PostgreSQL: an ungranted lock in ``pg_locks``; SQLite: it has entered
its write transaction, which waits for the one writer). A check that is not atomic with its write then
decides on a state that is no longer true, and the outcome shows it.

The semantics they pin down:
- admin keys: a revocation decides "not the last current key" and revokes under one lock, so concurrent
  revocations can never leave no current admin key;
- a session mint and an archive (or delete) of a store it attaches are ordered by the store's writer lock:
  whichever takes it first is first. An archive under way makes the mint wait and then refuse (409; 404 for a
  delete); a mint under way makes the archive wait, and the session then finds its store archived;
- a credential lookup that read the database before a revocation on this replica committed does not cache
  its stale answer after it: the revocation holds at once on the replica that made it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memsync.api.secret import decode_work_secret
from memsync.server.access import AccessService, Principal
from memsync.server.errors import ApiError
from memsync.server.keys import KeyKind, NamedKeys
from memsync.server.storage.backends import open_database
from memsync.server.storage.database import Database, Tx
from memsync.server.storage.postgres import PgDatabase
from memsync.server.stores.service import StoreService
from support.postgres import PostgresServer

pytestmark = pytest.mark.both_backends

ADMIN_KEY = "sk-ant-admin-test-races-0123456789"
WAIT_S = 30.0


class PausingDatabase(Database):
    """A real backend whose transactions a thread may pause just before they end (``pause_next``)."""

    def __init__(self, inner: Database) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.cursor_key = inner.cursor_key
        self.schema_version = inner.schema_version
        self._local = threading.local()
        self.other_entered_write = threading.Event()

    def pause_next(self, kind: str, hook: Callable[[], None]) -> None:
        """Run ``hook`` inside this thread's next ``kind`` (``read`` or ``write``) transaction, at its end."""
        self._local.hook = (kind, hook)

    @contextmanager
    def _paused(self, kind: str, inner: AbstractContextManager[Tx]) -> Iterator[Tx]:
        pending = getattr(self._local, "hook", None)
        if kind == "write" and pending is None:
            self.other_entered_write.set()
        with inner as tx:
            yield tx
            if pending is not None and pending[0] == kind:
                self._local.hook = None
                pending[1]()

    def read(self) -> AbstractContextManager[Tx]:
        return self._paused("read", self.inner.read())

    def read_each(self) -> AbstractContextManager[Tx]:
        return self._paused("read", self.inner.read_each())

    def write(self) -> AbstractContextManager[Tx]:
        return self._paused("write", self.inner.write())

    def close(self) -> None:
        self.inner.close()

    def other_is_waiting(self) -> bool:
        """The second call waits for a lock the paused first call holds."""
        if isinstance(self.inner, PgDatabase):
            with psycopg.connect(self.inner.url, autocommit=True) as conn:
                row = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            return row is not None and int(row[0]) > 0
        return self.other_entered_write.is_set()  # SQLite: one writer at a time, so it waits


@dataclass
class Outcome:
    value: Any = None
    error: ApiError | None = None

    @property
    def status(self) -> int:
        return 200 if self.error is None else self.error.status


@dataclass
class Interleaving:
    first: Outcome
    second: Outcome
    second_done_while_first_open: bool  # the second call returned before the first one's transaction ended


def interleave(
    db: PausingDatabase,
    kind: str,
    first: Callable[[], Any],
    second: Callable[[], Any],
) -> Interleaving:
    """``first`` paused at the end of its ``kind`` transaction while ``second`` runs. A write is let go once
    the second call returned or waits for it; a read (which no writer waits for) once the second returned."""
    first_paused, second_done = threading.Event(), threading.Event()
    outcomes = (Outcome(), Outcome())
    seen: list[bool] = []

    def hold() -> None:
        first_paused.set()
        deadline = time.monotonic() + WAIT_S
        while not second_done.is_set() and not (kind == "write" and db.other_is_waiting()):
            assert time.monotonic() < deadline, "the second call neither finished nor waited"
            second_done.wait(0.01)
        seen.append(second_done.is_set())  # still inside the first transaction: nothing can end it now

    def run(call: Callable[[], Any], outcome: Outcome) -> None:
        try:
            outcome.value = call()
        except ApiError as exc:
            outcome.error = exc

    def run_first() -> None:
        db.pause_next(kind, hold)
        run(first, outcomes[0])

    def run_second() -> None:
        try:
            run(second, outcomes[1])
        finally:
            second_done.set()

    db.other_entered_write.clear()
    one = threading.Thread(target=run_first)
    one.start()
    assert first_paused.wait(WAIT_S), "the first call never reached its pause"
    two = threading.Thread(target=run_second)
    two.start()
    one.join(WAIT_S)
    two.join(WAIT_S)
    assert not one.is_alive() and not two.is_alive(), "a call hung"
    assert len(seen) == 1
    return Interleaving(outcomes[0], outcomes[1], seen[0])


@pytest.fixture
def db(store_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PausingDatabase]:
    if store_backend == "postgresql":
        pg: PostgresServer = request.getfixturevalue("postgres")
        inner = open_database(pg.new_database("races"))
    else:
        inner = open_database(tmp_path / "store.db")
    wrapped = PausingDatabase(inner)
    try:
        yield wrapped
    finally:
        wrapped.close()


@pytest.fixture
def access(db: PausingDatabase) -> AccessService:
    return AccessService(db, ADMIN_KEY, "http://store.test", cache_ttl_s=60.0)


def admin(access: AccessService) -> Principal:
    return Principal("api_actor", access.admin_key_id)


def body(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode()


def current_keys(access: AccessService) -> list[str]:
    listed = NamedKeys(access).list(admin(access), "admin")["data"]
    return [k["id"] for k in listed if k["revoked_at"] is None]


def test_concurrent_revocations_leave_a_current_admin_key(db: PausingDatabase, access: AccessService) -> None:
    keys = NamedKeys(access)
    other = keys.create(admin(access), "admin", body({"name": "other"}))["id"]
    run = interleave(
        db,
        "write",
        lambda: keys.revoke(admin(access), "admin", access.admin_key_id),
        lambda: keys.revoke(admin(access), "admin", other),
    )
    first, second = run.first, run.second
    assert first.status == 200
    assert second.status == 409, second.value
    assert second.error is not None and "last current admin key" in second.error.message
    assert current_keys(access) == [other]


def new_store(service: StoreService, access: AccessService, name: str) -> str:
    store_id: str = service.create_store(admin(access), body({"name": name}))["id"]
    return store_id


def mint(access: AccessService, store_id: str) -> Callable[[], dict[str, Any]]:
    request = {"resources": [{"type": "memory_store", "memory_store_id": store_id}]}
    return lambda: access.mint_session(admin(access), body(request))


@pytest.mark.parametrize(("end", "refusal"), [("archive_store", 409), ("delete_store", 404)])
def test_a_store_ending_first_refuses_a_concurrent_mint(
    db: PausingDatabase, access: AccessService, end: str, refusal: int
) -> None:
    service = StoreService(db)
    store_id = new_store(service, access, "ends-first")
    run = interleave(
        db, "write", lambda: getattr(service, end)(admin(access), store_id), mint(access, store_id)
    )
    first, second = run.first, run.second
    assert first.status == 200
    assert not run.second_done_while_first_open, "the mint answered while the store was ending"
    assert second.status == refusal, second.value
    assert second.error is not None and store_id in second.error.message


def test_a_mint_first_is_followed_by_the_archive(db: PausingDatabase, access: AccessService) -> None:
    service = StoreService(db)
    store_id = new_store(service, access, "mint-first")
    run = interleave(
        db, "write", mint(access, store_id), lambda: service.archive_store(admin(access), store_id)
    )
    first, second = run.first, run.second
    assert first.status == 200 and second.status == 200
    assert not run.second_done_while_first_open, "the archive answered while the mint was under way"
    assert second.value["archived_at"] is not None
    # The session was made first; its store is archived now: readable, and writes are refused.
    token = decode_work_secret(first.value["work_secret"]).sessions_token
    session = access.authenticate(None, f"Bearer {token}")
    assert session.session is not None
    assert [r.store_id for r in session.session.resources] == [store_id]
    assert service.get_store(session, store_id)["archived_at"] is not None
    with pytest.raises(ApiError) as refused:
        service.create_memory(session, store_id, body({"path": "/late.md", "content": "x"}), None)
    assert refused.value.status == 409 and "archived" in refused.value.message


@pytest.mark.parametrize("credential", ["admin key", "viewer key", "sessions token"])
def test_a_lookup_before_a_revocation_does_not_cache_the_revoked_credential(
    db: PausingDatabase, access: AccessService, credential: str
) -> None:
    """The lookup reads the credential as current, then (before it caches that) the credential is revoked
    in this process: an admin key or a viewer key revoked, or a sessions token's session deleted."""
    revoke: Callable[[], Any]
    if credential in ("admin key", "viewer key"):
        kind: KeyKind = "admin" if credential == "admin key" else "viewer"
        keys = NamedKeys(access)
        created = keys.create(admin(access), kind, body({"name": "rotated"}))
        headers: tuple[str | None, str | None] = (created["key"], None)
        revoke = partial(keys.revoke, admin(access), kind, created["id"])
    else:
        store_id = new_store(StoreService(db), access, "token-lookup")
        minted = mint(access, store_id)()
        headers = (None, f"Bearer {decode_work_secret(minted['work_secret']).sessions_token}")
        revoke = partial(access.delete_session, admin(access), minted["session"]["id"])
    run = interleave(db, "read", lambda: access.authenticate(*headers), revoke)
    assert run.second_done_while_first_open  # the lookup read the credential before the revocation committed
    assert run.first.status == 200 and run.second.status == 200
    assert access.cached(*headers) is None, f"the revoked {credential}'s stale lookup was cached"
    with pytest.raises(ApiError) as refused:
        access.authenticate(*headers)
    assert refused.value.status == 401


def test_a_refresh_reads_the_credential_again_while_the_cache_still_serves_it(
    db: PausingDatabase, access: AccessService
) -> None:
    """Another replica revokes a sessions token: this process's cache does not hear of it, serves the token
    until its answer expires, and drops it as soon as a refresh (ahead of that expiry) reads it again."""
    store_id = new_store(StoreService(db), access, "refresh")
    minted = mint(access, store_id)()
    headers = (None, f"Bearer {decode_work_secret(minted['work_secret']).sessions_token}")
    assert access.authenticate(*headers).actor_id == minted["session"]["id"]
    other_replica = AccessService(db, ADMIN_KEY, "http://store.test", cache_ttl_s=60.0)
    other_replica.delete_session(admin(other_replica), minted["session"]["id"])
    assert access.cached(*headers) is not None  # still served: the revocation was made elsewhere
    assert not access.cached_and_due(*headers)[1]  # read a moment ago, with a 60 s time to live
    access.refresh(*headers)
    assert access.cached(*headers) is None
    with pytest.raises(ApiError) as refused:
        access.authenticate(*headers)
    assert refused.value.status == 401
