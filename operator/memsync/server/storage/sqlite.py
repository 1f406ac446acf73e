"""SQLite backend: one file, WAL, one connection per thread.

Every write is one ``BEGIN IMMEDIATE`` transaction taken under an in-process lock (one writer at a time,
queued fairly instead of spinning on SQLITE_BUSY; several worker processes on one file queue on SQLite's own
lock through the busy timeout), so every writer of every store is serialised and ``lock_store_row`` has
nothing to add. Reads run in one deferred transaction, which in WAL mode is a consistent snapshot.

The database file is created owner-only (0600) before SQLite opens it, and an existing one (or its
``-wal`` and ``-shm`` files) is brought to 0600: SQLite gives the files it creates next to the database (the
write-ahead log and its shared-memory index) the database file's own mode, so none is ever readable by others.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memsync.server.storage import migrations
from memsync.server.storage.change_cache import Marker
from memsync.server.storage.database import (
    Database,
    DuplicateKeyError,
    Row,
    Tx,
    WouldWait,
    apply_migrations,
    ensure_secret,
)
from memsync.server.storage.sqlite_changes import MarkerMemory, WalIndex

logger = logging.getLogger("memsync.server")

PRIVATE_MODE = 0o600
#: The files SQLite keeps next to the database in WAL mode.
COMPANION_SUFFIXES = ("-wal", "-shm")


def make_private(path: str) -> None:
    """Create ``path`` 0600 if missing, else bring it and its WAL companions to 0600 (never via a symlink)."""
    opens = [(path, os.O_CREAT)] + [(path + suffix, 0) for suffix in COMPANION_SUFFIXES]
    for name, create in opens:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | create, PRIVATE_MODE)
        except FileNotFoundError:
            continue  # a companion SQLite has not made yet: it will inherit the database's mode
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode != PRIVATE_MODE:
                os.fchmod(fd, PRIVATE_MODE)
        except PermissionError:
            # another user's file (a volume shared through its group): only its owner can change its mode
            logger.warning(
                "the store database file belongs to another user and stays mode %04o: its owner can make "
                "it 0600",
                mode,
                extra={"path": name},
            )
        finally:
            os.close(fd)


class SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(sql, tuple(args)).fetchall()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, tuple(args)).rowcount

    def lock_store_row(self, store_id: str) -> None:
        """All writers already hold the one write lock (BEGIN IMMEDIATE)."""

    def lock_admin_keys(self) -> None:
        """All writers already hold the one write lock (BEGIN IMMEDIATE)."""


class RememberingTx(SqliteTx):
    """``read_now``'s statements, with the stores' change markers remembered between commits
    (``sqlite_changes``): each statement is its own transaction, so a marker read is as good as the database's
    state when it began."""

    def __init__(self, conn: sqlite3.Connection, index: WalIndex, memory: MarkerMemory) -> None:
        super().__init__(conn)
        self.index = index
        self.memory = memory

    def store_change(self, store_id: str) -> Marker | None:
        state = self.index.state()  # before the statement: see MarkerMemory.put
        if state is None:
            return super().store_change(store_id)
        known = self.memory.get(store_id, state)
        if known is not None:
            return known
        marker = super().store_change(store_id)
        if marker is not None:
            self.memory.put(store_id, marker, state)
        return marker


class SqliteDatabase(Database):
    """Thread-safe access to one SQLite file (a connection per thread, one writer at a time)."""

    backend = "sqlite"

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        # the change markers ``read_now`` remembers, and the WAL-index that says when they hold (opened after
        # this process's first connection, closed before its connections: see ``sqlite_changes``)
        self._index: WalIndex | None = None
        self._index_tried = False
        self.markers = MarkerMemory()
        if self._on_disk:
            make_private(self.path)
        with self.write() as tx:
            self.schema_version = apply_migrations(tx, migrations.SQLITE)
            self.cursor_key = ensure_secret(tx, "cursor_key")

    @property
    def _on_disk(self) -> bool:
        """A database file named by its path (not in memory, not a ``file:`` URI)."""
        return self.path != ":memory:" and not self.path.startswith("file:")

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (waits up to the busy timeout for a lock)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(self._busy_timeout_ms)
        return conn

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        if self._closed:
            raise RuntimeError("database is closed")
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        with self._all_lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            index, self._index = self._index, None
            if index is not None:
                index.close()
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    @contextmanager
    def write(self) -> Iterator[Tx]:
        conn = self.conn()
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTx(conn)
                conn.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                conn.execute("ROLLBACK")
                if "UNIQUE" in str(exc):
                    raise DuplicateKeyError(str(exc)) from None
                raise
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def read(self) -> Iterator[Tx]:
        conn = self.conn()
        conn.execute("BEGIN")
        try:
            yield SqliteTx(conn)
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    @contextmanager
    def read_each(self) -> Iterator[Tx]:
        yield SqliteTx(self.conn())  # autocommit: each statement is its own (snapshot) transaction

    reads_without_waiting = True
    read_now_runs_statements = True

    def _open_index(self) -> WalIndex | None:
        """The database's WAL-index, opened once (while this process holds connections to it); None when it
        has none (not a file in WAL mode): ``read_now`` then asks SQLite every time."""
        with self._all_lock:
            if not self._index_tried and not self._closed:
                self._index_tried = True
                self._index = WalIndex.open(self.path) if self._on_disk and self._all else None
                if self._index is None:
                    logger.info("store change markers are read from SQLite on every probe (no WAL index)")
            return self._index

    @contextmanager
    def read_now(self) -> Iterator[Tx]:
        """Statements on this thread's second connection, whose busy timeout is 0: in WAL mode a
        reader does not wait for writers, and in the rare moments it would (a checkpoint resetting the log,
        another process recovering it) SQLite answers BUSY at once, which is ``WouldWait``."""
        try:
            conn: sqlite3.Connection | None = getattr(self._local, "now", None)
            if conn is None:  # made here, so that BUSY while setting it up is WouldWait too
                conn = self._local.now = self._connect(0)
            index = self._index if self._index_tried else self._open_index()
            yield SqliteTx(conn) if index is None else RememberingTx(conn, index, self.markers)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise WouldWait(str(exc)) from None
            raise
