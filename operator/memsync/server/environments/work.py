"""The work queue of the store server's environments: work items and their leases.

A session minted into an environment queues one ``session`` work item carrying the session's work-item
secret. Workers poll the queue with an environment key, acknowledge what they claim, keep the lease with
heartbeats (the sessions token or the environment key) and stop the item when done. The lease rules are
in :mod:`memsync.server.environments.rules`; this module stores them and answers the work API's wire
shapes. The secret stays with the item until it stops (a reclaimed item is handed out with it again) and
only a poll answers it.

Every lease change is a compare-and-set on the lease that was read (``Tx.save_work``), so replicas sharing
one database never hand out one item twice and never lose a heartbeat to a concurrent stop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool

from memsync.server.environments import rules as wl
from memsync.server.environments.service import Caller, EnvironmentService, environment_row
from memsync.server.errors import ApiError, conflict, invalid, not_found
from memsync.server.ids import format_ts, new_id, now_ts
from memsync.server.storage.database import Database, Tx
from memsync.server.storage.environment_queries import WorkRecord


class StopWorkRequest(BaseModel):
    """The optional body of a work item's stop (unknown fields are ignored, as the hosted API does)."""

    model_config = ConfigDict(extra="ignore")

    force: StrictBool = False


WORK_PREFIX = "work_"
DEFAULT_LEASE_TTL_S = 300
LEASE_TTL_MIN_S = 2
LEASE_TTL_MAX_S = 3600
LIST_LIMIT_MAX = 100
POLL_RECHECK_S = 0.25  # a long poll re-reads the queue this often (another replica may have queued work)
CAS_ATTEMPTS = 20  # re-reads of an item whose lease another transaction changed first


@dataclass(frozen=True)
class WorkRow:
    """A work item with its lease parsed."""

    record: WorkRecord
    lease: wl.Lease

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def session_id(self) -> str:
        return self.record.session_id


def _ts(epoch: float | None) -> str | None:
    return None if epoch is None else format_ts(datetime.fromtimestamp(epoch, UTC))


def _lease_text(lease: wl.Lease) -> str:
    return json.dumps(asdict(lease), sort_keys=True)


def _parsed(record: WorkRecord) -> WorkRow:
    return WorkRow(record, wl.Lease(**json.loads(record.lease)))


def work_json(row: WorkRow, *, with_secret: bool = False) -> dict[str, Any]:
    lease, rec = row.lease, row.record
    return {
        "type": "work",
        "id": rec.id,
        "environment_id": rec.environment_id,
        "state": lease.state,
        "data": {"type": "session", "id": rec.session_id},
        "metadata": dict(rec.metadata),
        "secret": rec.secret if with_secret else None,
        "created_at": rec.created_at,
        "acknowledged_at": _ts(lease.acknowledged_at),
        "started_at": _ts(lease.started_at),
        "latest_heartbeat_at": _ts(lease.latest_heartbeat_at),
        "stop_requested_at": _ts(lease.stop_requested_at),
        "stopped_at": _ts(lease.stopped_at),
    }


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


def _save(tx: Tx, work: WorkRow, lease: wl.Lease, worker_id: str | None = None) -> WorkRow | None:
    """``work`` with ``lease`` written, or None when another transaction changed the item first. The secret
    is dropped once the item stops."""
    secret = None if lease.state == "stopped" else work.record.secret
    text = _lease_text(lease)
    if not tx.save_work(work.record, state=lease.state, lease=text, secret=secret, worker_id=worker_id):
        return None
    record = replace(
        work.record,
        state=lease.state,
        lease=text,
        secret=secret,
        worker_id=worker_id or work.record.worker_id,
    )
    return WorkRow(record, lease)


def _expired(tx: Tx, work: WorkRow, now: float) -> WorkRow | None:
    """The item with its lease expired as of ``now`` (written when that changed it); None: raced."""
    lease = wl.expire(work.lease, now)
    return work if lease == work.lease else _save(tx, work, lease)


class WorkItems:
    """The work endpoints' semantics (synchronous, like StoreService); callers are checked by ``envs``."""

    def __init__(
        self,
        db: Database,
        envs: EnvironmentService,
        *,
        lease_ttl_s: int = DEFAULT_LEASE_TTL_S,
        first_heartbeat_s: int = wl.DEFAULT_FIRST_HEARTBEAT_S,
    ) -> None:
        self.db = db
        self.envs = envs
        self.lease_ttl_s = lease_ttl_s
        self.first_heartbeat_s = first_heartbeat_s
        self._queue_changed = threading.Condition()

    def require_item(self, c: Caller, environment_id: str, work: WorkRow) -> None:
        """An admin key, the item's environment key, or the token of the item's session."""
        if c.kind == "session" and c.session_id == work.session_id:
            return
        self.envs.require_environment(c, environment_id)

    def enqueue_session(self, tx: Tx, env_id: str, session_id: str, secret: str) -> str:
        """Inside the transaction that mints the session: queue its work item; returns the work id."""
        if environment_row(tx, env_id).archived_at is not None:
            raise conflict(f"environment {env_id} is archived and takes no new sessions")
        work_id = new_id(WORK_PREFIX)
        lease = wl.Lease(state="queued", ttl_seconds=self.lease_ttl_s)
        tx.insert_work(
            work_id, env_id, session_id, secret, now=now_ts(), state=lease.state, lease=_lease_text(lease)
        )
        return work_id

    def queue_changed(self) -> None:
        with self._queue_changed:
            self._queue_changed.notify_all()

    def _item(self, tx: Tx, env_id: str, work_id: str, now: float) -> WorkRow:
        for _ in range(CAS_ATTEMPTS):
            record = tx.get_work(env_id, work_id)
            if record is None:
                raise not_found(f"work item {work_id!r} not found in environment {env_id}")
            work = _expired(tx, _parsed(record), now)
            if work is not None:
                return work
        raise conflict(f"work item {work_id} keeps changing; try again")

    def _try_claim(self, env_id: str, reclaim_ms: int, worker_id: str | None) -> WorkRow | None:
        now = time.time()
        with self.db.write() as tx:
            for record in tx.open_work(env_id):
                work = _expired(tx, _parsed(record), now)
                if work is None or not wl.pollable(work.lease, now, reclaim_ms):
                    continue  # changed by another transaction (claimed, stopped): not this poll's
                claimed = _save(tx, work, wl.on_poll(work.lease, now), worker_id)
                if claimed is not None:
                    return claimed
        return None

    def poll(
        self, c: Caller, env_id: str, block_ms: int | None, reclaim_ms: int | None, worker_id: str | None
    ) -> dict[str, Any] | None:
        self.envs.require_environment(c, env_id)
        if block_ms is not None and not 1 <= block_ms <= wl.BLOCK_MS_MAX:
            raise invalid(f"block_ms must be between 1 and {wl.BLOCK_MS_MAX}, got {block_ms}")
        if reclaim_ms is not None and reclaim_ms < 0:
            raise invalid(f"reclaim_older_than_ms must not be negative, got {reclaim_ms}")
        with self.db.read_each() as tx:
            if environment_row(tx, env_id).archived_at is not None:
                # a 400, which pollers treat as final (a 409 would be retried forever)
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"environment {env_id} is archived: its work queue hands out no more work",
                    extra={"details": {"error_code": "environment_archived"}},
                    headers={"x-should-retry": "false"},
                )
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
                self._queue_changed.wait(timeout=min(left, POLL_RECHECK_S))

    def _transition(
        self, c: Caller, env_id: str, work_id: str, change: Callable[[wl.Lease, float], wl.Lease]
    ) -> WorkRow:
        now = time.time()
        with self.db.write() as tx:
            for _ in range(CAS_ATTEMPTS):
                work = self._item(tx, env_id, work_id, now)
                self.require_item(c, env_id, work)
                try:
                    lease = change(work.lease, now)
                except wl.LeaseRefused as exc:
                    raise _refused(exc, work.lease) from None
                saved = _save(tx, work, lease)
                if saved is not None:
                    return saved
        raise conflict(f"work item {work_id} keeps changing; try again")

    def ack(self, c: Caller, env_id: str, work_id: str) -> dict[str, Any]:
        self.envs.require_environment(c, env_id)
        window = self.first_heartbeat_s
        return work_json(
            self._transition(c, env_id, work_id, lambda lease, now: wl.on_ack(lease, now, window))
        )

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
        with self.db.write() as tx:
            work = self._item(tx, env_id, work_id, time.time())
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
        with self.db.write() as tx:
            records = tx.work_page(env_id, int(page or 0), size + 1)
            items = [self._item(tx, env_id, r.id, now) for r in records[:size]]
        next_page = str(records[size - 1].seq) if len(records) > size else None
        return {"data": [work_json(w) for w in items], "next_page": next_page}

    def stats(self, c: Caller, env_id: str) -> dict[str, Any]:
        self.envs.require_environment(c, env_id)
        with self.db.read() as tx:
            records = tx.open_work(env_id)
        queued = [w for w in map(_parsed, records) if w.lease.state == "queued"]
        pending = [w for w in queued if w.lease.polled_at is not None]
        return {
            "type": "work_queue_stats",
            "depth": len(queued) - len(pending),
            "pending": len(pending),
            "oldest_queued_at": queued[0].record.created_at if queued else None,
            "workers_polling": None,
        }
