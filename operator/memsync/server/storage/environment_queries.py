"""The queries of the self-hosted environments (environments, their keys, the work queue, session events),
part of every store database transaction (``db.Tx``), written once for both backends.

Concurrency: a work item's lease is written with a compare-and-set on the lease it was read with
(``save_work`` answers False when another transaction changed it first), so two replicas polling the same
queue cannot both claim an item: on PostgreSQL the second UPDATE waits for the first transaction and then
finds the lease changed; on SQLite every writer is already serialised. A session's scripted events are
advanced under ``lock_script`` (a row lock on PostgreSQL, the one write lock on SQLite).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memsync.server.storage.rows import Row
from memsync.server.storage.store_queries import TxCore

__all__ = ["EnvironmentQueries", "EnvironmentRow", "EventQueries", "WorkQueries", "WorkRecord"]


@dataclass(frozen=True)
class EnvironmentRow:
    seq: int
    id: str
    name: str
    description: str | None
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    archived_at: str | None


@dataclass(frozen=True)
class WorkRecord:
    """A work item as stored: its lease is the JSON the lease rules read and write
    (``environments.rules.Lease``)."""

    seq: int
    id: str
    environment_id: str
    session_id: str
    secret: str | None
    metadata: dict[str, str]
    created_at: str
    worker_id: str | None
    state: str
    lease: str


_ENV_COLS = "seq, id, name, description, metadata, created_at, updated_at, archived_at"
_WORK_COLS = "seq, id, environment_id, session_id, secret, metadata, created_at, worker_id, state, lease"


def _environment(row: Row) -> EnvironmentRow:
    return EnvironmentRow(**{**row, "metadata": json.loads(row["metadata"])})


def _work(row: Row) -> WorkRecord:
    return WorkRecord(**{**row, "metadata": json.loads(row["metadata"])})


class EnvironmentQueries(TxCore):
    """Environments and their keys (kept as SHA-256 digests)."""

    def insert_environment(
        self, env_id: str, name: str, description: str | None, metadata: dict[str, str], now: str
    ) -> None:
        self.execute(
            "INSERT INTO environments (id, name, description, metadata, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (env_id, name, description, json.dumps(metadata), now, now),
        )

    def get_environment(self, env_id: str) -> EnvironmentRow | None:
        row = self.one(f"SELECT {_ENV_COLS} FROM environments WHERE id = ?", (env_id,))  # noqa: S608
        return None if row is None else _environment(row)

    def list_environments(self) -> list[EnvironmentRow]:
        return [_environment(r) for r in self.rows(f"SELECT {_ENV_COLS} FROM environments ORDER BY seq")]  # noqa: S608

    def archive_environment(self, env_id: str, now: str) -> None:
        self.execute(
            "UPDATE environments SET archived_at = COALESCE(archived_at, ?), updated_at = ? WHERE id = ?",
            (now, now, env_id),
        )

    def insert_environment_key(self, key_id: str, env_id: str, key_hash: str, now: str) -> None:
        self.execute(
            "INSERT INTO environment_keys (id, environment_id, key_hash, created_at) VALUES (?, ?, ?, ?)",
            (key_id, env_id, key_hash, now),
        )

    def environment_of_key(self, key_hash: str) -> str | None:
        """The environment a current (unrevoked) key belongs to."""
        row = self.one(
            "SELECT environment_id FROM environment_keys WHERE key_hash = ? AND revoked_at IS NULL",
            (key_hash,),
        )
        return None if row is None else str(row["environment_id"])

    def revoke_environment_key(self, env_id: str, key_id: str, now: str) -> int:
        return self.execute(
            "UPDATE environment_keys SET revoked_at = COALESCE(revoked_at, ?) "
            "WHERE id = ? AND environment_id = ?",
            (now, key_id, env_id),
        )


class WorkQueries(TxCore):
    """The work queue: items and their leases."""

    def insert_work(
        self, work_id: str, env_id: str, session_id: str, secret: str, *, now: str, state: str, lease: str
    ) -> None:
        self.execute(
            "INSERT INTO work_items (id, environment_id, session_id, secret, metadata, created_at, state, "
            "lease) VALUES (?, ?, ?, ?, '{}', ?, ?, ?)",
            (work_id, env_id, session_id, secret, now, state, lease),
        )

    def get_work(self, env_id: str, work_id: str) -> WorkRecord | None:
        row = self.one(
            f"SELECT {_WORK_COLS} FROM work_items WHERE id = ? AND environment_id = ?",  # noqa: S608
            (work_id, env_id),
        )
        return None if row is None else _work(row)

    def open_work(self, env_id: str) -> list[WorkRecord]:
        """Every item of the environment that has not stopped, oldest first."""
        return [
            _work(r)
            for r in self.rows(
                f"SELECT {_WORK_COLS} FROM work_items "  # noqa: S608
                "WHERE environment_id = ? AND state <> 'stopped' ORDER BY seq",
                (env_id,),
            )
        ]

    def work_page(self, env_id: str, after_seq: int, limit: int) -> list[WorkRecord]:
        return [
            _work(r)
            for r in self.rows(
                f"SELECT {_WORK_COLS} FROM work_items "  # noqa: S608
                "WHERE environment_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (env_id, after_seq, limit),
            )
        ]

    def save_work(
        self,
        work: WorkRecord,
        *,
        state: str,
        lease: str,
        secret: str | None,
        worker_id: str | None = None,
    ) -> bool:
        """Write a new lease if the stored one is still ``work.lease``; False when another transaction
        changed it first (the caller re-reads)."""
        changed = self.execute(
            "UPDATE work_items SET state = ?, lease = ?, secret = ?, worker_id = COALESCE(?, worker_id) "
            "WHERE id = ? AND lease = ?",
            (state, lease, secret, worker_id, work.id, work.lease),
        )
        return changed == 1

    def environment_of_session(self, session_id: str) -> str | None:
        """The environment the session's first work item was queued in (None: minted without one)."""
        row = self.one(
            "SELECT environment_id FROM work_items WHERE session_id = ? ORDER BY seq LIMIT 1", (session_id,)
        )
        return None if row is None else str(row["environment_id"])

    def session_in_environment(self, session_id: str, env_id: str) -> bool:
        return (
            self.one(
                "SELECT 1 AS found FROM work_items WHERE session_id = ? AND environment_id = ?",
                (session_id, env_id),
            )
            is not None
        )


class EventQueries(TxCore):
    """A session's event history and the script that plays the agent's side."""

    def insert_event(self, session_id: str, event_id: str, event_type: str, body: str) -> None:
        self.execute(
            "INSERT INTO session_events (session_id, id, type, body) VALUES (?, ?, ?, ?)",
            (session_id, event_id, event_type, body),
        )

    def events_after(self, session_id: str, after_seq: int, limit: int | None = None) -> list[Row]:
        sql = "SELECT seq, body FROM session_events WHERE session_id = ? AND seq > ? ORDER BY seq"
        args: Sequence[Any] = (session_id, after_seq)
        if limit is not None:
            sql += " LIMIT ?"
            args = (*args, limit)
        return self.rows(sql, args)

    def last_event_seq(self, session_id: str) -> int:
        row = self.one("SELECT MAX(seq) AS seq FROM session_events WHERE session_id = ?", (session_id,))
        return 0 if row is None else int(row["seq"] or 0)

    def insert_script(self, session_id: str, script: str) -> None:
        self.execute(
            "INSERT INTO session_scripts (session_id, script, position) VALUES (?, ?, 0)",
            (session_id, script),
        )

    def lock_script(self, session_id: str) -> Row | None:
        """The session's script and position, locked until the transaction ends (a no-op UPDATE takes the
        row lock on PostgreSQL; SQLite writers are serialised already). None: the session has no script."""
        self.execute("UPDATE session_scripts SET position = position WHERE session_id = ?", (session_id,))
        return self.one("SELECT script, position FROM session_scripts WHERE session_id = ?", (session_id,))

    def set_script_position(self, session_id: str, position: int) -> None:
        self.execute("UPDATE session_scripts SET position = ? WHERE session_id = ?", (position, session_id))
