"""The store server's storage interface: rows, the queries of one transaction, and what a backend provides.

Two backends implement it with the same semantics: SQLite (``sqlite``, one file, the embedded default) and
PostgreSQL (``postgres``, for several replicas). The contract every backend keeps:

- ``write()`` is one atomic transaction. Inside it, ``Tx.get_store(..., lock=True)`` serialises every writer
  of that store until commit, so a precondition check and the write it guards, a path-clash check and the
  insert, or the per-store cap and the create, cannot interleave with another writer of the store. (SQLite
  serialises all writers; PostgreSQL locks the store's row.)
- ``read()`` is one consistent snapshot across its statements.
- A unique-key violation inside ``write()`` surfaces as ``DuplicateKeyError``.

The SQL is shared and written with ``?`` placeholders; a backend adapts the placeholder style and how content
is stored (TEXT in SQLite, the UTF-8 bytes in PostgreSQL).
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager

from memsync.server.storage.browser_queries import AuditQueries, ViewerQueries
from memsync.server.storage.environment_queries import EnvironmentQueries, EventQueries, WorkQueries
from memsync.server.storage.migrations import META_TABLE, SCHEMA_VERSION_KEY, Migration, pending
from memsync.server.storage.rows import (
    AdminKeyRow,
    DuplicateKeyError,
    MemoryRow,
    ResourceRow,
    Row,
    SessionRow,
    StoreRow,
    VersionRow,
    WouldWait,
)
from memsync.server.storage.store_queries import AccessQueries, MemoryQueries, StoreQueries, VersionQueries

__all__ = [
    "AdminKeyRow",
    "Database",
    "DuplicateKeyError",
    "MemoryRow",
    "ResourceRow",
    "Row",
    "SessionRow",
    "StoreRow",
    "Tx",
    "VersionRow",
    "WouldWait",
    "apply_migrations",
    "ensure_secret",
]


class Tx(
    StoreQueries,
    MemoryQueries,
    VersionQueries,
    AccessQueries,
    EnvironmentQueries,
    WorkQueries,
    EventQueries,
    ViewerQueries,
    AuditQueries,
):
    """The queries of one transaction. A backend supplies execution and the content encoding."""


class Database(ABC):
    """A backend: transactions over one database, and the server-wide secrets kept in it."""

    backend: str
    cursor_key: bytes
    schema_version: int

    @abstractmethod
    def read(self) -> AbstractContextManager[Tx]:
        """A consistent snapshot for reads."""

    def read_each(self) -> AbstractContextManager[Tx]:
        """For reads whose statements need no common snapshot (one statement, or rows written together in
        one transaction and never changed after): each statement is its own transaction, which saves
        PostgreSQL the two round trips of an explicit one."""
        return self.read()

    #: Whether ``read_now`` can answer anything: with no network round trip and no wait for a lock, so the
    #: event loop may run it itself. SQLite in WAL mode reads on the calling thread (a reader never waits for
    #: a writer); PostgreSQL, where every statement is a round trip, answers only the stores' change markers
    #: it remembers (``change_cache``).
    reads_without_waiting = False
    #: Whether ``read_now`` runs statements (SQLite: any row, a credential's included) or answers only from
    #: memory (PostgreSQL: the change markers; a credential is never at hand there).
    read_now_runs_statements = False

    def read_now(self) -> AbstractContextManager[Tx]:
        """``read_each`` for the event loop: what it reads returns at once or raises ``WouldWait`` (the
        database is busy, or the answer is not at hand: run the read the ordinary way, in the threadpool).
        Only where ``reads_without_waiting``."""
        raise WouldWait(f"{self.backend} reads may wait")

    @abstractmethod
    def write(self) -> AbstractContextManager[Tx]:
        """One atomic write transaction, rolled back on any exception."""

    @abstractmethod
    def close(self) -> None: ...

    def pool_stats(self) -> dict[str, int]:
        """Connection-pool gauges for /metrics (name -> value); empty when there is no pool."""
        return {}

    def describe(self) -> str:
        """Where the data lives, for logs (never a password)."""
        return self.backend


def apply_migrations(tx: Tx, migrations: tuple[Migration, ...]) -> int:
    """Bring the schema up to date inside the caller's (locked) write transaction; the version reached."""
    tx.execute(META_TABLE)
    current = int(tx.meta(SCHEMA_VERSION_KEY) or 0)
    for migration in pending(migrations, current):
        for statement in migration.statements:
            tx.execute(statement)
        tx.set_meta(SCHEMA_VERSION_KEY, str(migration.version))
        current = migration.version
    return current


def ensure_secret(tx: Tx, name: str) -> bytes:
    """A random server-wide secret kept in ``meta`` (made on first start), shared by every replica."""
    value = tx.meta(name)
    if value is None:
        value = secrets.token_hex(32)
        tx.set_meta(name, value)
    return bytes.fromhex(value)
