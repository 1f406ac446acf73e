"""SQLite persistence for the store server: one file, WAL, one connection per thread.

Every write is one ``BEGIN IMMEDIATE`` transaction, taken under an in-process lock (one writer at a time,
queued fairly instead of spinning on SQLITE_BUSY), so a precondition check and the write it guards are
atomic. Reads that need several statements run in one deferred transaction, which in WAL mode is a
consistent snapshot.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stores (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    archived_at TEXT
);
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    content TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    version_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (store_id, path)
);
CREATE TABLE IF NOT EXISTS versions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    store_id TEXT NOT NULL REFERENCES stores(id) ON DELETE CASCADE,
    memory_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    content TEXT,
    sha256 TEXT,
    size INTEGER,
    path TEXT,
    created_at TEXT NOT NULL,
    actor_type TEXT,
    actor_id TEXT,
    redacted_at TEXT,
    redactor_type TEXT,
    redactor_id TEXT
);
CREATE INDEX IF NOT EXISTS versions_by_store ON versions (store_id, seq);
CREATE INDEX IF NOT EXISTS versions_by_memory ON versions (store_id, memory_id, seq);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS session_resources (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    store_id TEXT NOT NULL,
    name TEXT,
    description TEXT,
    mount_path TEXT,
    access TEXT NOT NULL,
    instructions TEXT,
    PRIMARY KEY (session_id, position)
);
CREATE INDEX IF NOT EXISTS session_resources_by_store ON session_resources (store_id);
"""


@dataclass(frozen=True)
class StoreRow:
    seq: int
    id: str
    name: str
    description: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    archived_at: str | None


@dataclass(frozen=True)
class MemoryRow:
    id: str
    store_id: str
    path: str
    content: str | None  # None when the query did not load it
    sha256: str
    size: int
    version_id: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class VersionRow:
    seq: int
    id: str
    store_id: str
    memory_id: str
    operation: str
    content: str | None
    sha256: str | None
    size: int | None
    path: str | None
    created_at: str
    actor_type: str | None
    actor_id: str | None
    redacted_at: str | None
    redactor_type: str | None
    redactor_id: str | None


@dataclass(frozen=True)
class ResourceRow:
    store_id: str
    name: str | None
    description: str | None
    mount_path: str | None
    access: str
    instructions: str | None


@dataclass(frozen=True)
class SessionRow:
    id: str
    created_at: str
    resources: tuple[ResourceRow, ...]


def _store(row: sqlite3.Row) -> StoreRow:
    return StoreRow(
        seq=row["seq"],
        id=row["id"],
        name=row["name"],
        description=row["description"],
        metadata=json.loads(row["metadata"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        archived_at=row["archived_at"],
    )


_MEMORY_COLS = "id, store_id, path, {content} AS content, sha256, size, version_id, created_at, updated_at"


def _memory_cols(with_content: bool) -> str:
    return _MEMORY_COLS.format(content="content" if with_content else "NULL")


def _memory(row: sqlite3.Row) -> MemoryRow:
    return MemoryRow(**{k: row[k] for k in row.keys()})  # noqa: SIM118 - sqlite3.Row needs keys()


def _version(row: sqlite3.Row) -> VersionRow:
    return VersionRow(**{k: row[k] for k in row.keys()})  # noqa: SIM118


_VERSION_COLS = (
    "seq, id, store_id, memory_id, operation, {content} AS content, sha256, size, path, created_at, "
    "actor_type, actor_id, redacted_at, redactor_type, redactor_id"
)


def _version_cols(with_content: bool) -> str:
    return _VERSION_COLS.format(content="content" if with_content else "NULL")


class Database:
    """Thread-safe access to one SQLite file (a connection per thread, one writer at a time)."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        conn = self.conn()
        conn.executescript(SCHEMA)
        self.cursor_key = self._ensure_secret("cursor_key")

    # --- connections and transactions -------------------------------------------------------------------

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise RuntimeError("database is closed")
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        self._local.conn = conn
        with self._all_lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction (BEGIN IMMEDIATE ... COMMIT, rolled back on any exception)."""
        conn = self.conn()
        with self._write_lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for reads that take several statements."""
        conn = self.conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _ensure_secret(self, name: str) -> bytes:
        with self.write() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (name,)).fetchone()
            if row is None:
                value = secrets.token_hex(32)
                conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (name, value))
            else:
                value = row["value"]
        return bytes.fromhex(value)

    # --- stores -----------------------------------------------------------------------------------------

    @staticmethod
    def insert_store(
        conn: sqlite3.Connection,
        *,
        store_id: str,
        name: str,
        description: str,
        metadata: dict[str, str],
        now: str,
    ) -> StoreRow:
        conn.execute(
            "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?)",
            (store_id, name, description, json.dumps(metadata, sort_keys=True), now, now),
        )
        row = Database.get_store(conn, store_id)
        if row is None:
            raise RuntimeError("inserted store vanished")
        return row

    @staticmethod
    def get_store(conn: sqlite3.Connection, store_id: str) -> StoreRow | None:
        row = conn.execute("SELECT * FROM stores WHERE id = ?", (store_id,)).fetchone()
        return None if row is None else _store(row)

    @staticmethod
    def list_stores(
        conn: sqlite3.Connection,
        *,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        before_seq: int | None,
        only_ids: Sequence[str] | None,
        limit: int,
    ) -> list[StoreRow]:
        """Newest first (descending creation sequence)."""
        where = ["1=1"]
        args: list[Any] = []
        if not include_archived:
            where.append("archived_at IS NULL")
        if created_gte is not None:
            where.append("created_at >= ?")
            args.append(created_gte)
        if created_lte is not None:
            where.append("created_at <= ?")
            args.append(created_lte)
        if before_seq is not None:
            where.append("seq < ?")
            args.append(before_seq)
        if only_ids is not None:
            where.append(f"id IN ({','.join('?' * len(only_ids))})")
            args.extend(only_ids)
        args.append(limit)
        sql = f"SELECT * FROM stores WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?"  # noqa: S608
        return [_store(r) for r in conn.execute(sql, args)]

    @staticmethod
    def update_store(
        conn: sqlite3.Connection,
        *,
        store_id: str,
        name: str,
        description: str,
        metadata: dict[str, str],
        now: str,
    ) -> None:
        conn.execute(
            "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? WHERE id = ?",
            (name, description, json.dumps(metadata, sort_keys=True), now, store_id),
        )

    @staticmethod
    def archive_store(conn: sqlite3.Connection, store_id: str, now: str) -> None:
        conn.execute(
            "UPDATE stores SET archived_at = ? WHERE id = ? AND archived_at IS NULL", (now, store_id)
        )

    @staticmethod
    def delete_store(conn: sqlite3.Connection, store_id: str) -> None:
        conn.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
        conn.execute("DELETE FROM versions WHERE store_id = ?", (store_id,))
        conn.execute("DELETE FROM stores WHERE id = ?", (store_id,))

    # --- memories ---------------------------------------------------------------------------------------

    @staticmethod
    def get_memory(
        conn: sqlite3.Connection, store_id: str, memory_id: str, *, with_content: bool = True
    ) -> MemoryRow | None:
        row = conn.execute(
            f"SELECT {_memory_cols(with_content)} FROM memories WHERE id = ? AND store_id = ?",  # noqa: S608
            (memory_id, store_id),
        ).fetchone()
        return None if row is None else _memory(row)

    @staticmethod
    def find_blocker(
        conn: sqlite3.Connection,
        *,
        store_id: str,
        path: str,
        ancestors: Sequence[str],
        below: tuple[str, str],
        exclude_id: str | None = None,
    ) -> tuple[str, str] | None:
        """``(id, path)`` of a memory at ``path``, at one of its ancestors, or below it; None if none."""
        skip = exclude_id or ""
        row = conn.execute(
            "SELECT id, path FROM memories WHERE store_id = ? AND path = ? AND id != ?",
            (store_id, path, skip),
        ).fetchone()
        if row is None and ancestors:
            row = conn.execute(
                f"SELECT id, path FROM memories WHERE store_id = ? AND id != ? "  # noqa: S608
                f"AND path IN ({','.join('?' * len(ancestors))}) ORDER BY path LIMIT 1",
                (store_id, skip, *ancestors),
            ).fetchone()
        if row is None:
            row = conn.execute(
                "SELECT id, path FROM memories WHERE store_id = ? AND id != ? AND path >= ? AND path < ? "
                "ORDER BY path LIMIT 1",
                (store_id, skip, below[0], below[1]),
            ).fetchone()
        return None if row is None else (row["id"], row["path"])

    @staticmethod
    def count_memories(conn: sqlite3.Connection, store_id: str) -> int:
        row = conn.execute("SELECT COUNT(*) AS n FROM memories WHERE store_id = ?", (store_id,)).fetchone()
        return int(row["n"])

    @staticmethod
    def insert_memory(conn: sqlite3.Connection, m: MemoryRow) -> None:
        conn.execute(
            "INSERT INTO memories (id, store_id, path, content, sha256, size, version_id, created_at, "
            "updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (m.id, m.store_id, m.path, m.content, m.sha256, m.size, m.version_id, m.created_at, m.updated_at),
        )

    @staticmethod
    def update_memory(conn: sqlite3.Connection, m: MemoryRow) -> None:
        conn.execute(
            "UPDATE memories SET path = ?, content = ?, sha256 = ?, size = ?, version_id = ?, updated_at = ? "
            "WHERE id = ? AND store_id = ?",
            (m.path, m.content, m.sha256, m.size, m.version_id, m.updated_at, m.id, m.store_id),
        )

    @staticmethod
    def delete_memory(conn: sqlite3.Connection, store_id: str, memory_id: str) -> None:
        conn.execute("DELETE FROM memories WHERE id = ? AND store_id = ?", (memory_id, store_id))

    @staticmethod
    def memories_from(
        conn: sqlite3.Connection,
        store_id: str,
        *,
        bound: str,
        inclusive: bool,
        upper: str,
        limit: int,
        with_content: bool,
    ) -> list[MemoryRow]:
        op = ">=" if inclusive else ">"
        sql = (
            f"SELECT {_memory_cols(with_content)} FROM memories "  # noqa: S608
            f"WHERE store_id = ? AND path {op} ? AND path < ? ORDER BY path LIMIT ?"
        )
        return [_memory(r) for r in conn.execute(sql, (store_id, bound, upper, limit))]

    # --- versions ---------------------------------------------------------------------------------------

    @staticmethod
    def insert_version(conn: sqlite3.Connection, v: VersionRow) -> None:
        conn.execute(
            "INSERT INTO versions (id, store_id, memory_id, operation, content, sha256, size, path, "
            "created_at, actor_type, actor_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                v.id,
                v.store_id,
                v.memory_id,
                v.operation,
                v.content,
                v.sha256,
                v.size,
                v.path,
                v.created_at,
                v.actor_type,
                v.actor_id,
            ),
        )

    @staticmethod
    def get_version(
        conn: sqlite3.Connection, store_id: str, version_id: str, *, with_content: bool = True
    ) -> VersionRow | None:
        row = conn.execute(
            f"SELECT {_version_cols(with_content)} FROM versions WHERE id = ? AND store_id = ?",  # noqa: S608
            (version_id, store_id),
        ).fetchone()
        return None if row is None else _version(row)

    @staticmethod
    def list_versions(
        conn: sqlite3.Connection,
        store_id: str,
        *,
        filters: dict[str, str | None],
        before_seq: int | None,
        limit: int,
        with_content: bool,
    ) -> list[VersionRow]:
        """Newest first. ``filters`` keys: memory_id, operation, session_id, api_key_id, service_account_id,
        created_gte, created_lte."""
        where = ["store_id = ?"]
        args: list[Any] = [store_id]
        if filters.get("memory_id") is not None:
            where.append("memory_id = ?")
            args.append(filters["memory_id"])
        if filters.get("operation") is not None:
            where.append("operation = ?")
            args.append(filters["operation"])
        for key, actor_type in (
            ("session_id", "session_actor"),
            ("api_key_id", "api_actor"),
            ("service_account_id", "service_account_actor"),
        ):
            if filters.get(key) is not None:
                where.append("actor_type = ? AND actor_id = ?")
                args.extend([actor_type, filters[key]])
        if filters.get("created_gte") is not None:
            where.append("created_at >= ?")
            args.append(filters["created_gte"])
        if filters.get("created_lte") is not None:
            where.append("created_at <= ?")
            args.append(filters["created_lte"])
        if before_seq is not None:
            where.append("seq < ?")
            args.append(before_seq)
        args.append(limit)
        sql = (
            f"SELECT {_version_cols(with_content)} FROM versions "  # noqa: S608
            f"WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?"
        )
        return [_version(r) for r in conn.execute(sql, args)]

    @staticmethod
    def redact_version(
        conn: sqlite3.Connection, version_id: str, now: str, redactor_type: str, redactor_id: str
    ) -> None:
        conn.execute(
            "UPDATE versions SET content = NULL, sha256 = NULL, size = NULL, path = NULL, redacted_at = ?, "
            "redactor_type = ?, redactor_id = ? WHERE id = ? AND redacted_at IS NULL",
            (now, redactor_type, redactor_id, version_id),
        )

    # --- sessions ---------------------------------------------------------------------------------------

    @staticmethod
    def insert_session(
        conn: sqlite3.Connection, session_id: str, token_hash: str, now: str, resources: Sequence[ResourceRow]
    ) -> None:
        conn.execute(
            "INSERT INTO sessions (id, token_hash, created_at) VALUES (?, ?, ?)",
            (session_id, token_hash, now),
        )
        conn.executemany(
            "INSERT INTO session_resources (session_id, position, store_id, name, description, mount_path, "
            "access, instructions) VALUES (?,?,?,?,?,?,?,?)",
            [
                (session_id, i, r.store_id, r.name, r.description, r.mount_path, r.access, r.instructions)
                for i, r in enumerate(resources)
            ],
        )

    @staticmethod
    def _session(conn: sqlite3.Connection, row: sqlite3.Row | None) -> SessionRow | None:
        if row is None:
            return None
        resources = tuple(
            ResourceRow(
                store_id=r["store_id"],
                name=r["name"],
                description=r["description"],
                mount_path=r["mount_path"],
                access=r["access"],
                instructions=r["instructions"],
            )
            for r in conn.execute(
                "SELECT * FROM session_resources WHERE session_id = ? ORDER BY position", (row["id"],)
            )
        )
        return SessionRow(id=row["id"], created_at=row["created_at"], resources=resources)

    @staticmethod
    def get_session(conn: sqlite3.Connection, session_id: str) -> SessionRow | None:
        row = conn.execute("SELECT id, created_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return Database._session(conn, row)

    @staticmethod
    def session_by_token_hash(conn: sqlite3.Connection, token_hash: str) -> SessionRow | None:
        row = conn.execute(
            "SELECT id, created_at FROM sessions WHERE token_hash = ?", (token_hash,)
        ).fetchone()
        return Database._session(conn, row)
