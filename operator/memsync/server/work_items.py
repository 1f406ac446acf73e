"""The work queue of the store server's environments: work items and their leases.

A session minted into an environment queues one ``session`` work item carrying the session's work-item
secret. Workers poll the queue with an environment key, acknowledge what they claim, keep the lease with
heartbeats (the sessions token or the environment key) and stop the item when done. The lease rules are in
:mod:`memsync.server.work_lease`; this module stores them and answers the work API's wire shapes. The secret
stays with the item until it stops (a reclaimed item is handed out with it again) and only a poll answers it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from memsync.server import work_lease as wl
from memsync.server.db import Database
from memsync.server.environments import Caller, EnvironmentService
from memsync.server.errors import ApiError, conflict, invalid, not_found
from memsync.server.ids import format_ts, new_id, now_ts

WORK_PREFIX = "work_"
DEFAULT_LEASE_TTL_S = 300
LEASE_TTL_MIN_S = 2
LEASE_TTL_MAX_S = 3600
LIST_LIMIT_MAX = 100


@dataclass(frozen=True)
class WorkRow:
    id: str
    environment_id: str
    session_id: str
    secret: str | None
    metadata: dict[str, str]
    created_at: str
    lease: wl.Lease


def _ts(epoch: float | None) -> str | None:
    return None if epoch is None else format_ts(datetime.fromtimestamp(epoch, UTC))


def work_json(row: WorkRow, *, with_secret: bool = False) -> dict[str, Any]:
    lease = row.lease
    return {
        "type": "work",
        "id": row.id,
        "environment_id": row.environment_id,
        "state": lease.state,
        "data": {"type": "session", "id": row.session_id},
        "metadata": dict(row.metadata),
        "secret": row.secret if with_secret else None,
        "created_at": row.created_at,
        "acknowledged_at": _ts(lease.acknowledged_at),
        "started_at": _ts(lease.started_at),
        "latest_heartbeat_at": _ts(lease.latest_heartbeat_at),
        "stop_requested_at": _ts(lease.stop_requested_at),
        "stopped_at": _ts(lease.stopped_at),
    }


def _work(row: sqlite3.Row) -> WorkRow:
    return WorkRow(
        id=row["id"],
        environment_id=row["environment_id"],
        session_id=row["session_id"],
        secret=row["secret"],
        metadata=json.loads(row["metadata"]),
        created_at=row["created_at"],
        lease=wl.Lease(**json.loads(row["lease"])),
    )


def _refused(exc: wl.LeaseRefused, lease: wl.Lease) -> ApiError:
    if exc.status == 412:
        state = {
            "state": lease.state,
            "ttl_seconds": lease.ttl_seconds,
            "last_heartbeat": lease.last_heartbeat,
            "lease_extended": False,
        }
        details = {"error_code": "heartbeat_precondition_failed", "current_state": state}
        return ApiError(
            412,
            "precondition_failed_error",
            exc.message,
            extra={"details": details},
            headers={"x-should-retry": "false"},
        )
    return conflict(exc.message)


class WorkItems:
    """The work endpoints' semantics (synchronous, like StoreService); callers are checked by ``envs``."""

    def __init__(
        self, db: Database, envs: EnvironmentService, *, lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    ) -> None:
        self.db = db
        self.envs = envs
        self.lease_ttl_s = lease_ttl_s
        self._queue_changed = threading.Condition()

    def require_item(self, c: Caller, environment_id: str, work: WorkRow) -> None:
        """The admin, the item's environment key, or the token of the item's session."""
        if c.kind == "session" and c.session_id == work.session_id:
            return
        self.envs.require_environment(c, environment_id)

    def enqueue_session(self, conn: sqlite3.Connection, env_id: str, session_id: str, secret: str) -> str:
        """Inside the transaction that mints the session: queue its work item; returns the work id."""
        env = self.envs.environment_row(conn, env_id)
        if env["archived_at"] is not None:
            raise conflict(f"environment {env_id} is archived and takes no new sessions")
        work_id = new_id(WORK_PREFIX)
        lease = wl.Lease(state="queued", ttl_seconds=self.lease_ttl_s)
        conn.execute(
            "INSERT INTO work_items (id, environment_id, session_id, secret, metadata, created_at, lease) "
            "VALUES (?, ?, ?, ?, '{}', ?, ?)",
            (work_id, env_id, session_id, secret, now_ts(), json.dumps(asdict(lease))),
        )
        return work_id

    def queue_changed(self) -> None:
        with self._queue_changed:
            self._queue_changed.notify_all()

    @staticmethod
    def _save(
        conn: sqlite3.Connection, work: WorkRow, lease: wl.Lease, worker_id: str | None = None
    ) -> WorkRow:
        secret = None if lease.state == "stopped" else work.secret
        conn.execute(
            "UPDATE work_items SET lease = ?, secret = ?, worker_id = COALESCE(?, worker_id) WHERE id = ?",
            (json.dumps(asdict(lease)), secret, worker_id, work.id),
        )
        return WorkRow(
            work.id, work.environment_id, work.session_id, secret, work.metadata, work.created_at, lease
        )

    def _item(self, conn: sqlite3.Connection, env_id: str, work_id: str, now: float) -> WorkRow:
        row = conn.execute(
            "SELECT * FROM work_items WHERE id = ? AND environment_id = ?", (work_id, env_id)
        ).fetchone()
        if row is None:
            raise not_found(f"work item {work_id!r} not found in environment {env_id}")
        work = _work(row)
        expired = wl.expire(work.lease, now)
        return work if expired == work.lease else self._save(conn, work, expired)

    def _try_claim(self, env_id: str, reclaim_ms: int, worker_id: str | None) -> WorkRow | None:
        now = time.time()
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT * FROM work_items "
                "WHERE environment_id = ? AND json_extract(lease, '$.state') != 'stopped' ORDER BY seq",
                (env_id,),
            ).fetchall()
            for row in rows:
                work = _work(row)
                lease = wl.expire(work.lease, now)
                if lease != work.lease:
                    work = self._save(conn, work, lease)
                if wl.pollable(lease, now, reclaim_ms):
                    return self._save(conn, work, wl.on_poll(lease, now), worker_id)
        return None

    def poll(
        self, c: Caller, env_id: str, block_ms: int | None, reclaim_ms: int | None, worker_id: str | None
    ) -> dict[str, Any] | None:
        self.envs.require_environment(c, env_id)
        if block_ms is not None and not 1 <= block_ms <= wl.BLOCK_MS_MAX:
            raise invalid(f"block_ms must be between 1 and {wl.BLOCK_MS_MAX}, got {block_ms}")
        if reclaim_ms is not None and reclaim_ms < 0:
            raise invalid(f"reclaim_older_than_ms must not be negative, got {reclaim_ms}")
        env = self.envs.environment_row(self.db.conn(), env_id)
        if env["archived_at"] is not None:
            raise conflict(f"environment {env_id} is archived")
        reclaim = wl.DEFAULT_RECLAIM_MS if reclaim_ms is None else reclaim_ms
        deadline = time.monotonic() + (block_ms or 0) / 1000
        while True:
            work = self._try_claim(env_id, reclaim, worker_id)
            if work is not None:
                return work_json(work, with_secret=True)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with self._queue_changed:
                self._queue_changed.wait(timeout=min(left, 0.25))

    def _transition(self, c: Caller, env_id: str, work_id: str, change: Any) -> WorkRow:
        now = time.time()
        with self.db.write() as conn:
            work = self._item(conn, env_id, work_id, now)
            self.require_item(c, env_id, work)
            try:
                lease = change(work.lease, now)
            except wl.LeaseRefused as exc:
                raise _refused(exc, work.lease) from None
            return self._save(conn, work, lease)

    def ack(self, c: Caller, env_id: str, work_id: str) -> dict[str, Any]:
        self.envs.require_environment(c, env_id)
        return work_json(self._transition(c, env_id, work_id, wl.on_ack))

    def stop(self, c: Caller, env_id: str, work_id: str, force: bool) -> dict[str, Any]:
        work = self._transition(c, env_id, work_id, lambda lease, now: wl.on_stop(lease, now, force))
        self.queue_changed()
        return work_json(work)

    def heartbeat(
        self, c: Caller, env_id: str, work_id: str, expected: str | None, desired_ttl: int | None
    ) -> dict[str, Any]:
        ttl = wl.clamp_ttl(desired_ttl, self.lease_ttl_s, LEASE_TTL_MIN_S, LEASE_TTL_MAX_S)
        extended = False

        def beat(lease: wl.Lease, now: float) -> wl.Lease:
            nonlocal extended
            stamp = format_ts(datetime.fromtimestamp(now, UTC))
            if stamp == lease.last_heartbeat:
                stamp = format_ts(datetime.fromtimestamp(now + 1e-6, UTC))
            new, extended = wl.on_heartbeat(lease, now, stamp, expected, ttl)
            return new

        work = self._transition(c, env_id, work_id, beat)
        return {
            "type": "work_heartbeat",
            "last_heartbeat": work.lease.last_heartbeat or "",
            "lease_extended": extended,
            "state": work.lease.state,
            "ttl_seconds": work.lease.ttl_seconds,
        }

    def retrieve(self, c: Caller, env_id: str, work_id: str) -> dict[str, Any]:
        with self.db.write() as conn:
            work = self._item(conn, env_id, work_id, time.time())
        self.require_item(c, env_id, work)
        return work_json(work)

    def list_work(self, c: Caller, env_id: str, limit: int | None, page: str | None) -> dict[str, Any]:
        self.envs.require_environment(c, env_id)
        size = LIST_LIMIT_MAX if limit is None else limit
        if not 1 <= size <= LIST_LIMIT_MAX:
            raise invalid(f"limit must be between 1 and {LIST_LIMIT_MAX}, got {limit}")
        if page is not None and not page.isdigit():
            raise invalid("page is not a cursor this server issued")
        now = time.time()
        with self.db.write() as conn:
            seqs = conn.execute(
                "SELECT seq, id FROM work_items WHERE environment_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (env_id, int(page or 0), size + 1),
            ).fetchall()
            items = [self._item(conn, env_id, r["id"], now) for r in seqs[:size]]
        next_page = str(seqs[size - 1]["seq"]) if len(seqs) > size else None
        return {"data": [work_json(w) for w in items], "next_page": next_page}

    def stats(self, c: Caller, env_id: str) -> dict[str, Any]:
        self.envs.require_environment(c, env_id)
        rows = (
            self.db.conn()
            .execute("SELECT * FROM work_items WHERE environment_id = ? ORDER BY seq", (env_id,))
            .fetchall()
        )
        queued = [w for w in map(_work, rows) if w.lease.state == "queued"]
        pending = [w for w in queued if w.lease.polled_at is not None]
        return {
            "type": "work_queue_stats",
            "depth": len(queued) - len(pending),
            "pending": len(pending),
            "oldest_queued_at": queued[0].created_at if queued else None,
            "workers_polling": None,
        }
