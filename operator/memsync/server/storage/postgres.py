"""PostgreSQL backend: psycopg 3 with its connection pool, for one or many server replicas.

The service is synchronous code that FastAPI runs in its threadpool, so the synchronous psycopg driver fits
it as it is (asyncpg would need every endpoint rewritten as a coroutine, for no gain here: the time goes to
the database round trips and the JSON, not to thread switches). psycopg's binary wheel ships libpq, so no
system library is needed.

Semantics (the same as SQLite's, see ``database``):
- a write is one READ COMMITTED transaction; ``lock_store_row`` takes the store's row ``FOR UPDATE``, so the
  writers of one store queue (across replicas) while writers of other stores proceed. Every statement after
  the lock sees the latest committed state, so a precondition check, a path-clash check and the per-store
  cap are decided on the truth and cannot be raced past; ``lock_admin_keys`` does the same for the admin
  keys (a table lock that plain reads do not wait for);
- a read is one REPEATABLE READ, READ ONLY transaction: one snapshot for all its statements;
- migrations run under a transaction-scoped advisory lock, so replicas starting together migrate once;
- ``read_now`` (the event loop's reads, ``Database``) answers a store's change marker from this process's
  :class:`ChangeCache` and nothing else: every other statement, a miss, or a cache that does not hear
  changes now is ``WouldWait``. ``read_each`` answers a marker from the cache too, and remembers the ones it
  reads: statement-level reads, never a snapshot that could predate what the cache has heard. A write
  forgets its stores when it commits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from memsync.server.storage import migrations
from memsync.server.storage.change_cache import ChangeCache, Marker
from memsync.server.storage.database import (
    Database,
    DuplicateKeyError,
    Row,
    Tx,
    WouldWait,
    apply_migrations,
    ensure_secret,
)
from memsync.server.storage.pg_changes import ChangeListener

MIGRATION_LOCK_ID = 0x6D656D73796E63  # an arbitrary constant, the same in every replica ("memsync")
_QMARK = re.compile(r"\?")


def _sql(text: str) -> str:
    """``?`` placeholders to psycopg's ``%s`` (the shared SQL holds no literal ``?`` or ``%``)."""
    return _QMARK.sub("%s", text)


def redact_url(url: str) -> str:
    """The URL without its password, for logs."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


class PgTx(Tx):
    def __init__(
        self, conn: psycopg.Connection[dict[str, Any]], *, remember: ChangeCache | None = None
    ) -> None:
        self.conn = conn
        self.remember = remember  # only where each statement is its own transaction (``read_each``)
        self.changed: set[str] = set()  # the stores whose marker this transaction wrote

    def store_change(self, store_id: str) -> Marker | None:
        if self.remember is None:
            return super().store_change(store_id)
        known = self.remember.get(store_id)
        if known is not None:
            return known  # as good as the event loop's answer, without the round trip
        generation = self.remember.generation  # before the statement: see ChangeCache.put
        marker = super().store_change(store_id)
        if marker is not None:
            self.remember.put(store_id, marker, generation)
        return marker

    def store_changed(self, store_id: str, change_id: str) -> None:
        super().store_changed(store_id, change_id)
        self.changed.add(store_id)

    def delete_store(self, store_id: str) -> None:
        super().delete_store(store_id)
        self.changed.add(store_id)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(_sql(sql), tuple(args)).fetchall())

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self.conn.execute(_sql(sql), tuple(args)).rowcount

    def lock_store_row(self, store_id: str) -> None:
        self.conn.execute("SELECT 1 FROM stores WHERE id = %s FOR UPDATE", (store_id,))

    def lock_admin_keys(self) -> None:
        # Conflicts with itself and with every insert or update of the table, not with plain reads: the
        # writers of admin keys queue (across replicas) while authentication goes on reading.
        self.conn.execute("LOCK TABLE admin_keys IN SHARE ROW EXCLUSIVE MODE")

    content_holds = "position(? IN content) > 0"  # the content is BYTEA here, the needle its UTF-8 bytes

    def content_in(self, text: str | None) -> Any:
        return None if text is None else text.encode("utf-8")

    def content_out(self, value: Any) -> str | None:
        return None if value is None else bytes(value).decode("utf-8")


_ROUND_TRIP = "a PostgreSQL statement is a network round trip"


class CachedTx(Tx):
    """``read_now`` on PostgreSQL: the change markers this process remembers, and no statement at all."""

    def __init__(self, cache: ChangeCache) -> None:
        self.cache = cache

    def store_change(self, store_id: str) -> Marker | None:
        marker = self.cache.get(store_id)
        if marker is None:
            raise WouldWait(f"the change marker of {store_id} is not remembered now")
        return marker

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        raise WouldWait(_ROUND_TRIP)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        raise WouldWait(_ROUND_TRIP)

    def lock_store_row(self, store_id: str) -> None:
        raise WouldWait(_ROUND_TRIP)

    def lock_admin_keys(self) -> None:
        raise WouldWait(_ROUND_TRIP)


class PgDatabase(Database):
    backend = "postgresql"
    reads_without_waiting = True  # from the change cache only (``CachedTx``)

    def __init__(
        self,
        url: str,
        *,
        pool_min: int = 2,
        pool_max: int = 10,
        timeout_s: float = 30.0,
        listen: bool = True,
        changes: ChangeCache | None = None,
    ) -> None:
        self.url = url
        self.changes = changes if changes is not None else ChangeCache()
        self.listener = ChangeListener(url, self.changes) if listen else None
        self.pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] = ConnectionPool(
            url,
            min_size=pool_min,
            max_size=pool_max,
            timeout=timeout_s,
            kwargs={"row_factory": dict_row, "autocommit": True},  # transactions are explicit below
            open=False,
            name="memsync-store",
        )
        self.pool.open(wait=True, timeout=timeout_s)
        try:
            with self.write() as tx:
                assert isinstance(tx, PgTx)
                tx.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_ID,))
                self.schema_version = apply_migrations(tx, migrations.POSTGRES)
                self.cursor_key = ensure_secret(tx, "cursor_key")
        except BaseException:
            self.pool.close()
            raise
        if self.listener is not None:
            self.listener.start()

    def describe(self) -> str:
        return redact_url(self.url)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.pool.close()

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[PgTx]:
        with self.pool.connection() as conn:
            conn.execute(begin)
            try:
                yield PgTx(conn)
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    pass  # a broken connection: the pool discards it; the original error matters
                raise
            conn.execute("COMMIT")

    @contextmanager
    def write(self) -> Iterator[Tx]:
        tx: PgTx | None = None
        try:
            with self._transaction("BEGIN") as tx:
                yield tx
        except psycopg.errors.UniqueViolation as exc:
            raise DuplicateKeyError(str(exc.diag.message_primary or "duplicate key")) from None
        finally:  # committed (or not): before the write is answered, this process forgets what it wrote
            if tx is not None and tx.changed:
                self.changes.forget(tx.changed)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") as tx:
            yield tx

    @contextmanager
    def read_each(self) -> Iterator[Tx]:
        with self.pool.connection() as conn:
            yield PgTx(conn, remember=self.changes)  # autocommit: each statement is its own transaction

    @contextmanager
    def read_now(self) -> Iterator[Tx]:
        yield CachedTx(self.changes)

    def pool_stats(self) -> dict[str, int]:
        stats = self.pool.get_stats()
        return {
            "size": int(stats.get("pool_size", 0)),
            "available": int(stats.get("pool_available", 0)),
            "waiting": int(stats.get("requests_waiting", 0)),
            "max": int(stats.get("pool_max", self.pool.max_size)),
        }
