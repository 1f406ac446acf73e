"""The queries of the store browser (``server/ui``): viewer keys, its sign-in sessions, and the audit reads
(store summaries, content search, deleted memories, a store's writers in a time window); ``db.Tx`` combines
them with the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memsync.server.storage.rows import AdminKeyRow, MemoryRow, Row, VersionRow
from memsync.server.storage.store_queries import _VERSION_COLS, TxCore

__all__ = ["AuditQueries", "BrowserSessionRow", "StoreTally", "ViewerQueries", "WriterRow"]

_KEY_COLS = "id, name, created_at, revoked_at"


@dataclass(frozen=True)
class BrowserSessionRow:
    """A sign-in session of the store browser: the kind and id of the key it was signed in with."""

    key_kind: str  # "admin" or "viewer"
    key_id: str
    created_at: str
    expires_at: str


@dataclass(frozen=True)
class StoreTally:
    """What the browser's store list shows of a store besides its row."""

    memories: int = 0
    versions: int = 0
    deleted: int = 0
    last_write: str | None = None


@dataclass(frozen=True)
class WriterRow:
    """One actor's writes to a store in a time window."""

    actor_type: str | None
    actor_id: str | None
    writes: int
    created: int
    modified: int
    deleted: int
    first_write: str
    last_write: str


class ViewerQueries(TxCore):
    """Viewer keys (named, revocable, read-only) and the browser's sign-in sessions."""

    def viewer_key_by_hash(self, key_hash: str) -> AdminKeyRow | None:
        row = self.one(f"SELECT {_KEY_COLS} FROM viewer_keys WHERE key_hash = ?", (key_hash,))  # noqa: S608
        return None if row is None else AdminKeyRow(**row)

    def viewer_key(self, key_id: str) -> AdminKeyRow | None:
        row = self.one(f"SELECT {_KEY_COLS} FROM viewer_keys WHERE id = ?", (key_id,))  # noqa: S608
        return None if row is None else AdminKeyRow(**row)

    def insert_viewer_key(self, key_id: str, name: str, key_hash: str, now: str) -> None:
        self.execute(
            "INSERT INTO viewer_keys (id, name, key_hash, created_at) VALUES (?, ?, ?, ?)",
            (key_id, name, key_hash, now),
        )

    def list_viewer_keys(self) -> list[AdminKeyRow]:
        sql = f"SELECT {_KEY_COLS} FROM viewer_keys ORDER BY created_at, id"  # noqa: S608
        return [AdminKeyRow(**r) for r in self.rows(sql)]

    def revoke_viewer_key(self, key_id: str, now: str) -> int:
        return self.execute(
            "UPDATE viewer_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, key_id)
        )

    def insert_browser_session(
        self, token_hash: str, key_kind: str, key_id: str, now: str, expires_at: str
    ) -> None:
        self.execute("DELETE FROM ui_sessions WHERE expires_at <= ?", (now,))  # the expired ones go here
        self.execute(
            "INSERT INTO ui_sessions (token_hash, key_kind, key_id, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (token_hash, key_kind, key_id, now, expires_at),
        )

    def browser_session(self, token_hash: str) -> BrowserSessionRow | None:
        row = self.one(
            "SELECT key_kind, key_id, created_at, expires_at FROM ui_sessions WHERE token_hash = ?",
            (token_hash,),
        )
        return None if row is None else BrowserSessionRow(**row)

    def delete_browser_session(self, token_hash: str) -> None:
        self.execute("DELETE FROM ui_sessions WHERE token_hash = ?", (token_hash,))

    def delete_browser_sessions_of(self, key_id: str) -> None:
        self.execute("DELETE FROM ui_sessions WHERE key_id = ?", (key_id,))


class AuditQueries(TxCore):
    """What the store browser reads besides the API's own listings."""

    #: A backend's predicate "the memory's content holds the parameter" (its content column type differs).
    content_holds = "instr(content, ?) > 0"

    def store_tallies(self, store_ids: Sequence[str]) -> dict[str, StoreTally]:
        if not store_ids:
            return {}
        marks = ",".join("?" * len(store_ids))
        memories = {
            str(r["store_id"]): int(r["n"])
            for r in self.rows(
                f"SELECT store_id, COUNT(*) AS n FROM memories WHERE store_id IN ({marks}) "  # noqa: S608
                "GROUP BY store_id",
                store_ids,
            )
        }
        tallies = {store_id: StoreTally(memories=memories.get(store_id, 0)) for store_id in store_ids}
        for r in self.rows(
            "SELECT store_id, COUNT(*) AS versions, "  # noqa: S608
            "SUM(CASE WHEN operation = 'deleted' THEN 1 ELSE 0 END) AS deleted, "
            f"MAX(created_at) AS last_write FROM versions WHERE store_id IN ({marks}) GROUP BY store_id",
            store_ids,
        ):
            store_id = str(r["store_id"])
            tallies[store_id] = StoreTally(
                memories=memories.get(store_id, 0),
                versions=int(r["versions"]),
                deleted=int(r["deleted"] or 0),
                last_write=r["last_write"],
            )
        return tallies

    def search_memories(
        self, store_id: str, *, lower: str, upper: str, after: str, needle: str, limit: int
    ) -> list[MemoryRow]:
        """Memories whose path is in ``[lower, upper)`` and above ``after``, in path order, holding ``needle``
        (an exact substring; every memory when it is empty). No content is loaded."""
        where = "store_id = ? AND path >= ? AND path < ? AND path > ?"
        args: list[Any] = [store_id, lower, upper, after]
        if needle:
            where += f" AND {self.content_holds}"
            args.append(self.content_in(needle))
        args.append(limit)
        sql = (
            "SELECT id, store_id, path, NULL AS content, sha256, size, version_id, created_at, updated_at "  # noqa: S608
            f"FROM memories WHERE {where} ORDER BY path LIMIT ?"
        )
        return [self._memory(r) for r in self.rows(sql, args)]

    def deletions(self, store_id: str, *, before_seq: int | None, limit: int) -> list[VersionRow]:
        """The ``deleted`` versions of the store (each one a deleted memory), newest first."""
        where = "store_id = ? AND operation = 'deleted'"
        args: list[Any] = [store_id]
        if before_seq is not None:
            where += " AND seq < ?"
            args.append(before_seq)
        args.append(limit)
        cols = _VERSION_COLS.format(content="NULL")
        sql = f"SELECT {cols} FROM versions WHERE {where} ORDER BY seq DESC LIMIT ?"  # noqa: S608
        return [self._version(r) for r in self.rows(sql, args)]

    def last_written_version(self, store_id: str, memory_id: str) -> VersionRow | None:
        """The newest version of the memory that wrote content (its last state before a deletion)."""
        cols = _VERSION_COLS.format(content="NULL")
        row = self.one(
            f"SELECT {cols} FROM versions WHERE store_id = ? AND memory_id = ? "  # noqa: S608
            "AND operation != 'deleted' ORDER BY seq DESC LIMIT 1",
            (store_id, memory_id),
        )
        return None if row is None else self._version(row)

    def writers(self, store_id: str, *, gte: str, lte: str, limit: int) -> list[WriterRow]:
        """Who wrote to the store between ``gte`` and ``lte``, most recent writer first."""
        rows = self.rows(
            "SELECT actor_type, actor_id, COUNT(*) AS writes, "
            "SUM(CASE WHEN operation = 'created' THEN 1 ELSE 0 END) AS created, "
            "SUM(CASE WHEN operation = 'modified' THEN 1 ELSE 0 END) AS modified, "
            "SUM(CASE WHEN operation = 'deleted' THEN 1 ELSE 0 END) AS deleted, "
            "MIN(created_at) AS first_write, MAX(created_at) AS last_write "
            "FROM versions WHERE store_id = ? AND created_at >= ? AND created_at <= ? "
            "GROUP BY actor_type, actor_id ORDER BY MAX(created_at) DESC LIMIT ?",
            (store_id, gte, lte, limit),
        )
        return [_writer(r) for r in rows]


def _writer(r: Row) -> WriterRow:
    return WriterRow(
        actor_type=r["actor_type"],
        actor_id=r["actor_id"],
        writes=int(r["writes"]),
        created=int(r["created"] or 0),
        modified=int(r["modified"] or 0),
        deleted=int(r["deleted"] or 0),
        first_write=r["first_write"],
        last_write=r["last_write"],
    )
