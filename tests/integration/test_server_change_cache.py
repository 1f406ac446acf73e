"""PostgreSQL: a server process answers the probe's question (the store's change marker) from memory, and
forgets a store's marker whenever any replica changes or deletes the store, as the database announces it.

Two real ``PgDatabase`` objects on one database stand for two replicas: ``here`` listens, ``there`` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from memsync.server.storage.change_cache import ChangeCache
from memsync.server.storage.database import WouldWait
from memsync.server.storage.migrations import POSTGRES, SQLITE, latest
from memsync.server.storage.pg_changes import APPLICATION_NAME
from memsync.server.storage.postgres import PgDatabase
from memsync.server.storage.sqlite import SqliteDatabase
from memsync.server.stores.service import StoreService
from support.postgres import PostgresServer
from support.store_service import ADMIN, new_store, write_memory

WAIT_S = 10.0


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.02)


@pytest.fixture
def replicas(postgres: PostgresServer) -> Iterator[tuple[PgDatabase, PgDatabase]]:
    url = postgres.new_database("changes")
    # a long liveness: a CI machine that stalls this process for seconds must not turn the cache off midway
    here = PgDatabase(url, changes=ChangeCache(liveness_s=60.0))
    there = PgDatabase(url, listen=False)
    try:
        eventually(lambda: here.changes.listening, "the listener hears changes")
        yield here, there
    finally:
        here.close()
        there.close()


def remembered(db: PgDatabase, store_id: str) -> tuple[str, int] | None:
    """What the event loop's read answers, or None when it would go to the database."""
    try:
        with db.read_now() as tx:
            return tx.store_change(store_id)
    except WouldWait:
        return None


def read(db: PgDatabase, store_id: str) -> tuple[str, int] | None:
    with db.read_each() as tx:
        return tx.store_change(store_id)


def test_a_marker_read_from_the_database_is_then_answered_from_memory(
    replicas: tuple[PgDatabase, PgDatabase],
) -> None:
    here, _ = replicas
    store = new_store(here)
    assert remembered(here, store) is None  # never read: the event loop's read would go to the database
    marker = read(here, store)
    assert marker is not None
    assert remembered(here, store) == marker
    here.pool.close()  # no connection at all: the answer does not come from the database
    assert remembered(here, store) == marker


def test_the_threadpool_read_answers_from_memory_too(replicas: tuple[PgDatabase, PgDatabase]) -> None:
    here, there = replicas
    store = new_store(there)
    marker = read(here, store)
    with psycopg.connect(there.url, autocommit=True) as conn:  # a change nobody announces
        conn.execute("ALTER TABLE stores DISABLE TRIGGER stores_changed")
        conn.execute("UPDATE stores SET change_seq = change_seq + 1 WHERE id = %s", (store,))
        conn.execute("ALTER TABLE stores ENABLE TRIGGER stores_changed")
    assert read(here, store) == marker  # remembered: no statement was run
    with there.read_each() as tx:
        assert tx.store_change(store) != marker  # what a process that remembers nothing reads


def test_a_write_on_another_replica_is_forgotten_when_announced(
    replicas: tuple[PgDatabase, PgDatabase],
) -> None:
    here, there = replicas
    store = new_store(there)
    before = read(here, store)
    assert remembered(here, store) == before
    write_memory(there, store, "/notes/a.md")
    eventually(lambda: remembered(here, store) is None, "the other replica's write is forgotten")
    after = read(here, store)
    assert after is not None and after != before
    assert remembered(here, store) == after


def test_this_process_forgets_its_own_write_before_the_write_returns(
    replicas: tuple[PgDatabase, PgDatabase],
) -> None:
    here, _ = replicas
    store = new_store(here)
    assert here.listener is not None
    here.listener.stop()  # no announcement can help it here...
    here.changes.heard(here.changes.clock())  # ...while the cache still answers for a moment
    read(here, store)
    assert remembered(here, store) is not None
    write_memory(here, store, "/notes/a.md")
    assert remembered(here, store) is None


def test_a_deleted_store_is_forgotten(replicas: tuple[PgDatabase, PgDatabase]) -> None:
    here, there = replicas
    store = new_store(there)
    read(here, store)
    assert remembered(here, store) is not None
    StoreService(there).delete_store(ADMIN, store)
    eventually(lambda: remembered(here, store) is None, "the deleted store is forgotten")
    assert read(here, store) is None


def test_a_lost_listener_answers_nothing_from_memory_and_misses_nothing_when_back(
    replicas: tuple[PgDatabase, PgDatabase], postgres: PostgresServer
) -> None:
    here, there = replicas
    store = new_store(there)
    before = read(here, store)
    assert remembered(here, store) == before
    with psycopg.connect(there.url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchone()
    assert killed is not None and killed[0] == 1
    eventually(lambda: not here.changes.listening, "the lost listener stops the answers from memory")
    assert remembered(here, store) is None
    write_memory(there, store, "/notes/while-deaf.md")  # announced to nobody
    eventually(lambda: here.changes.listening, "the listener reconnects")
    assert remembered(here, store) is None  # nothing from before the loss survives it
    after = read(here, store)
    assert after is not None and after != before
    assert remembered(here, store) == after


def test_both_backends_are_at_the_same_schema_version_and_postgresql_has_the_trigger(
    replicas: tuple[PgDatabase, PgDatabase], tmp_path: Path
) -> None:
    here, _ = replicas
    assert here.schema_version == latest(POSTGRES) == latest(SQLITE) == 5
    sqlite = SqliteDatabase(tmp_path / "s.db")
    try:
        assert sqlite.schema_version == 5
    finally:
        sqlite.close()
    with psycopg.connect(here.url, autocommit=True) as conn:
        triggers = {
            row[0] for row in conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal").fetchall()
        }
    assert triggers == {"stores_changed", "stores_truncated"}


def test_truncating_the_stores_forgets_every_marker(replicas: tuple[PgDatabase, PgDatabase]) -> None:
    here, there = replicas
    stores = [new_store(there) for _ in range(2)]
    for store in stores:
        read(here, store)
    assert all(remembered(here, store) is not None for store in stores)
    with psycopg.connect(there.url, autocommit=True) as conn:
        conn.execute("TRUNCATE memories, versions, session_resources, stores")
    eventually(lambda: all(remembered(here, s) is None for s in stores), "a truncation forgets every store")
