"""The queries of one store database transaction, grouped by what they touch; ``db.Tx`` combines them.

The SQL is written once with ``?`` placeholders; a backend supplies execution and the content encoding.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from memsync.server.storage.rows import (
    AdminKeyRow,
    MemoryRow,
    ResourceRow,
    Row,
    SessionRow,
    StoreRow,
    VersionRow,
)

__all__ = ["AccessQueries", "MemoryQueries", "StoreQueries", "TxCore", "VersionQueries"]

_STORE_COLS = (
    "seq, id, name, description, metadata, created_at, updated_at, archived_at, change_seq, change_id"
)
_MEMORY_COLS = "id, store_id, path, {content} AS content, sha256, size, version_id, created_at, updated_at"
_VERSION_COLS = (
    "seq, id, store_id, memory_id, operation, {content} AS content, sha256, size, path, created_at, "
    "actor_type, actor_id, redacted_at, redactor_type, redactor_id"
)
_SESSION_COLS = "id, created_at, expires_at, revoked_at"


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


class TxCore(ABC):
    """What a backend supplies (execution, content encoding) and the helpers and meta queries on top."""

    @abstractmethod
    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """Run ``sql`` (``?`` placeholders) and return its rows as mappings."""

    @abstractmethod
    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run a statement; the number of rows it changed."""

    @abstractmethod
    def lock_store_row(self, store_id: str) -> None:
        """Hold the store's writer lock until the transaction ends (no-op where all writers serialise)."""

    @abstractmethod
    def lock_admin_keys(self) -> None:
        """Hold the admin keys' writer lock until the transaction ends (no-op where all writers serialise):
        a decision over the set of current keys and the write it guards cannot interleave with another."""

    def content_in(self, text: str | None) -> Any:
        return text

    def content_out(self, value: Any) -> str | None:
        return None if value is None else str(value)

    # --- helpers ------------------------------------------------------------------------------------------

    def one(self, sql: str, args: Sequence[Any] = ()) -> Row | None:
        found = self.rows(sql, args)
        return found[0] if found else None

    def _memory(self, row: Row) -> MemoryRow:
        return MemoryRow(**{**row, "content": self.content_out(row["content"])})

    def _version(self, row: Row) -> VersionRow:
        return VersionRow(**{**row, "content": self.content_out(row["content"])})

    @staticmethod
    def _store(row: Row) -> StoreRow:
        return StoreRow(**{**row, "metadata": json.loads(row["metadata"])})

    # --- meta ---------------------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self.one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str) -> None:
        if self.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key)) == 0:
            self.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))


class StoreQueries(TxCore):
    """Memory store rows."""

    def insert_store(
        self, *, store_id: str, name: str, description: str, metadata: dict[str, str], now: str
    ) -> StoreRow:
        self.execute(
            "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?)",
            (store_id, name, description, json.dumps(metadata, sort_keys=True), now, now),
        )
        row = self.get_store(store_id)
        if row is None:
            raise RuntimeError("inserted store vanished")
        return row

    def get_store(self, store_id: str, *, lock: bool = False) -> StoreRow | None:
        """The store; with ``lock`` (inside ``write()`` only) its writer lock is taken first."""
        if lock:
            self.lock_store_row(store_id)
        row = self.one(f"SELECT {_STORE_COLS} FROM stores WHERE id = ?", (store_id,))  # noqa: S608
        return None if row is None else self._store(row)

    def store_change(self, store_id: str) -> tuple[str, int] | None:
        """The store's change marker (``change_id``, ``change_seq``), all a listing's ETag needs of it; None
        when there is no such store."""
        row = self.one("SELECT change_id, change_seq FROM stores WHERE id = ?", (store_id,))
        return None if row is None else (str(row["change_id"]), int(row["change_seq"]))

    def list_stores(
        self,
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
            if not only_ids:
                return []
            where.append(f"id IN ({_placeholders(len(only_ids))})")
            args.extend(only_ids)
        args.append(limit)
        sql = f"SELECT {_STORE_COLS} FROM stores WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?"  # noqa: S608
        return [self._store(r) for r in self.rows(sql, args)]

    def update_store(
        self, *, store_id: str, name: str, description: str, metadata: dict[str, str], now: str
    ) -> None:
        self.execute(
            "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? WHERE id = ?",
            (name, description, json.dumps(metadata, sort_keys=True), now, store_id),
        )

    def archive_store(self, store_id: str, now: str) -> None:
        self.execute(
            "UPDATE stores SET archived_at = ? WHERE id = ? AND archived_at IS NULL", (now, store_id)
        )

    def delete_store(self, store_id: str) -> None:
        self.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
        self.execute("DELETE FROM versions WHERE store_id = ?", (store_id,))
        self.execute("DELETE FROM stores WHERE id = ?", (store_id,))

    def store_changed(self, store_id: str, change_id: str) -> None:
        """Record a memory write in the store (same transaction): its listing's ETag changes."""
        self.execute(
            "UPDATE stores SET change_seq = change_seq + 1, change_id = ? WHERE id = ?", (change_id, store_id)
        )


class MemoryQueries(TxCore):
    """Memory rows, the path-conflict lookup and the listing order."""

    def get_memory(self, store_id: str, memory_id: str, *, with_content: bool = True) -> MemoryRow | None:
        cols = _MEMORY_COLS.format(content="content" if with_content else "NULL")
        row = self.one(
            f"SELECT {cols} FROM memories WHERE id = ? AND store_id = ?",  # noqa: S608
            (memory_id, store_id),
        )
        return None if row is None else self._memory(row)

    def find_blocker(
        self,
        *,
        store_id: str,
        path: str,
        ancestors: Sequence[str],
        below: tuple[str, str],
        exclude_id: str | None = None,
    ) -> tuple[str, str] | None:
        """``(id, path)`` of a memory at ``path``, at one of its ancestors, or below it; None if none."""
        skip = exclude_id or ""
        row = self.one(
            "SELECT id, path FROM memories WHERE store_id = ? AND path = ? AND id != ?",
            (store_id, path, skip),
        )
        if row is None and ancestors:
            row = self.one(
                f"SELECT id, path FROM memories WHERE store_id = ? AND id != ? "  # noqa: S608
                f"AND path IN ({_placeholders(len(ancestors))}) ORDER BY path LIMIT 1",
                (store_id, skip, *ancestors),
            )
        if row is None:
            row = self.one(
                "SELECT id, path FROM memories WHERE store_id = ? AND id != ? AND path >= ? AND path < ? "
                "ORDER BY path LIMIT 1",
                (store_id, skip, below[0], below[1]),
            )
        return None if row is None else (str(row["id"]), str(row["path"]))

    def count_memories(self, store_id: str) -> int:
        row = self.one("SELECT COUNT(*) AS n FROM memories WHERE store_id = ?", (store_id,))
        return 0 if row is None else int(row["n"])

    def insert_memory(self, m: MemoryRow) -> None:
        self.execute(
            "INSERT INTO memories (id, store_id, path, content, sha256, size, version_id, created_at, "
            "updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                m.id,
                m.store_id,
                m.path,
                self.content_in(m.content),
                m.sha256,
                m.size,
                m.version_id,
                m.created_at,
                m.updated_at,
            ),
        )

    def update_memory(self, m: MemoryRow) -> None:
        self.execute(
            "UPDATE memories SET path = ?, content = ?, sha256 = ?, size = ?, version_id = ?, updated_at = ? "
            "WHERE id = ? AND store_id = ?",
            (
                m.path,
                self.content_in(m.content),
                m.sha256,
                m.size,
                m.version_id,
                m.updated_at,
                m.id,
                m.store_id,
            ),
        )

    def delete_memory(self, store_id: str, memory_id: str) -> None:
        self.execute("DELETE FROM memories WHERE id = ? AND store_id = ?", (memory_id, store_id))

    def memories_from(
        self, store_id: str, *, bound: str, inclusive: bool, upper: str, limit: int, with_content: bool
    ) -> list[MemoryRow]:
        op = ">=" if inclusive else ">"
        cols = _MEMORY_COLS.format(content="content" if with_content else "NULL")
        sql = (
            f"SELECT {cols} FROM memories "  # noqa: S608
            f"WHERE store_id = ? AND path {op} ? AND path < ? ORDER BY path LIMIT ?"
        )
        return [self._memory(r) for r in self.rows(sql, (store_id, bound, upper, limit))]


class VersionQueries(TxCore):
    """Memory version rows."""

    def insert_version(self, v: VersionRow) -> None:
        self.execute(
            "INSERT INTO versions (id, store_id, memory_id, operation, content, sha256, size, path, "
            "created_at, actor_type, actor_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                v.id,
                v.store_id,
                v.memory_id,
                v.operation,
                self.content_in(v.content),
                v.sha256,
                v.size,
                v.path,
                v.created_at,
                v.actor_type,
                v.actor_id,
            ),
        )

    def get_version(self, store_id: str, version_id: str, *, with_content: bool = True) -> VersionRow | None:
        cols = _VERSION_COLS.format(content="content" if with_content else "NULL")
        row = self.one(
            f"SELECT {cols} FROM versions WHERE id = ? AND store_id = ?",  # noqa: S608
            (version_id, store_id),
        )
        return None if row is None else self._version(row)

    def list_versions(
        self,
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
        for key, column in (("memory_id", "memory_id"), ("operation", "operation")):
            if filters.get(key) is not None:
                where.append(f"{column} = ?")
                args.append(filters[key])
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
        cols = _VERSION_COLS.format(content="content" if with_content else "NULL")
        sql = f"SELECT {cols} FROM versions WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?"  # noqa: S608
        return [self._version(r) for r in self.rows(sql, args)]

    def redact_version(self, version_id: str, now: str, redactor_type: str, redactor_id: str) -> None:
        self.execute(
            "UPDATE versions SET content = NULL, sha256 = NULL, size = NULL, path = NULL, redacted_at = ?, "
            "redactor_type = ?, redactor_id = ? WHERE id = ? AND redacted_at IS NULL",
            (now, redactor_type, redactor_id, version_id),
        )


class AccessQueries(TxCore):
    """Sessions (with their store resources) and admin keys."""

    def insert_session(
        self,
        session_id: str,
        token_hash: str,
        now: str,
        resources: Sequence[ResourceRow],
        *,
        expires_at: str | None,
    ) -> None:
        self.execute(
            "INSERT INTO sessions (id, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?)",
            (session_id, token_hash, now, expires_at),
        )
        for i, r in enumerate(resources):
            self.execute(
                "INSERT INTO session_resources (session_id, position, store_id, name, description, "
                "mount_path, access, instructions) VALUES (?,?,?,?,?,?,?,?)",
                (session_id, i, r.store_id, r.name, r.description, r.mount_path, r.access, r.instructions),
            )

    def _session(self, row: Row | None) -> SessionRow | None:
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
            for r in self.rows(
                "SELECT store_id, name, description, mount_path, access, instructions "
                "FROM session_resources WHERE session_id = ? ORDER BY position",
                (row["id"],),
            )
        )
        return SessionRow(
            id=row["id"],
            created_at=row["created_at"],
            resources=resources,
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
        )

    def get_session(self, session_id: str) -> SessionRow | None:
        return self._session(self.one(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ?", (session_id,)))  # noqa: S608

    def session_by_token_hash(self, token_hash: str) -> SessionRow | None:
        return self._session(
            self.one(f"SELECT {_SESSION_COLS} FROM sessions WHERE token_hash = ?", (token_hash,))  # noqa: S608
        )

    def revoke_session(self, session_id: str, now: str) -> None:
        self.execute(
            "UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, session_id)
        )

    # --- admin keys ---------------------------------------------------------------------------------------

    def admin_key_by_hash(self, key_hash: str) -> AdminKeyRow | None:
        row = self.one(
            "SELECT id, name, created_at, revoked_at FROM admin_keys WHERE key_hash = ?", (key_hash,)
        )
        return None if row is None else AdminKeyRow(**row)

    def insert_admin_key(self, key_id: str, name: str, key_hash: str, now: str) -> None:
        self.execute(
            "INSERT INTO admin_keys (id, name, key_hash, created_at) VALUES (?, ?, ?, ?)",
            (key_id, name, key_hash, now),
        )

    def admin_key(self, key_id: str) -> AdminKeyRow | None:
        row = self.one("SELECT id, name, created_at, revoked_at FROM admin_keys WHERE id = ?", (key_id,))
        return None if row is None else AdminKeyRow(**row)

    def count_current_admin_keys(self) -> int:
        row = self.one("SELECT COUNT(*) AS n FROM admin_keys WHERE revoked_at IS NULL")
        return 0 if row is None else int(row["n"])

    def list_admin_keys(self) -> list[AdminKeyRow]:
        return [
            AdminKeyRow(**r)
            for r in self.rows(
                "SELECT id, name, created_at, revoked_at FROM admin_keys ORDER BY created_at, id"
            )
        ]

    def revoke_admin_key(self, key_id: str, now: str) -> int:
        return self.execute(
            "UPDATE admin_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, key_id)
        )
