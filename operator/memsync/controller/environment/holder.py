"""The operator's hold on the work items it acknowledged, until the Pod's runner takes the lease over.

From the acknowledgement on, the operator heartbeats the item itself (the first heartbeat at once, then every
``lease.operator_interval`` of the TTL the server answered), so the lease never depends on how long the
sandbox Pod takes to be scheduled, pull its image and mount its stores. The runner's first heartbeat takes
the lease over with a compare-and-set on the operator's value (``memsync.contracts.lease``); the operator's
next heartbeat is then refused with 412, the lease it reports is the runner's, and the operator stops
holding: there is never a moment without a holder, and never two holders the server accepts. The time from
the acknowledgement to the runner's first heartbeat is exported as
``memsync_operator_environment_handover_seconds``.

A hold also ends when the item is stopping or stopped (the heartbeat says so), when the lease is lost (a
refusal for a re-queued item, a 4xx that will not change, or no heartbeat answered within the TTL), at the
item's start deadline (``expired``: the operator never heartbeats an item past it; the loop then
force-stops it, as the SDK's worker stops an item it cannot run), or when the operator releases it (the
AgentEnvironment is gone, the operator shuts down). A released lease is left to run out: the runner can
still take it over while it lasts.

A hold survives a change of the operator's leader: after each heartbeat the value it holds is recorded
(``record``: in the AgentEnvironment's status), and the new leader resumes the hold from that value. Its first
heartbeat is then a compare-and-set on the old leader's value: it holds the lease from there, or, refused
because the runner took it over meanwhile, it lets the runner have it (never a second holder). A hold that
ends for good (taken over, stopping, lost, expired) clears the record; one released on shutdown keeps it,
for the next leader.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anthropic

from memsync.contracts import lease
from memsync.controller import metrics
from memsync.controller.environment.queue import QueueError, WorkQueue

logger = logging.getLogger("memsync.environment")


#: How a hold ended at the item's start deadline.
EXPIRED = "expired"


@dataclass(frozen=True)
class Hold:
    work_id: str
    session_id: str
    sessions_token: str | None
    acknowledged_at: str | None
    #: the heartbeat value an earlier holder (the old leader) left: the first heartbeat's expected value
    resume_from: str | None = None
    deadline_s: float | None = None  # seconds from the hold's start to the start deadline


#: Records the value a hold holds its lease with (None: the hold ended for good).
Record = Callable[[Hold, str | None], Awaitable[None]]
#: How a hold that ends for good ended.
ENDED: Final = frozenset({"taken_over", "stopping", "lost", "expired"})


async def _no_record(_hold: Hold, _value: str | None) -> None:
    return None


class LeaseHolder:
    """The items one AgentEnvironment's loop holds, one heartbeat task each."""

    def __init__(
        self,
        fields: Callable[..., dict[str, Any]],
        monotonic: Callable[[], float] = time.monotonic,
        record: Record = _no_record,
    ):
        self.fields = fields
        self.monotonic = monotonic
        self.record = record
        self.tasks: dict[str, asyncio.Task[str]] = {}
        self.outcomes: dict[str, str] = {}  # work id -> how its hold ended (kept for the loop and tests)
        self.values: dict[str, str] = {}  # work id -> the heartbeat value the lease is held with

    def holding(self, work_id: str) -> bool:
        task = self.tasks.get(work_id)
        return task is not None and not task.done()

    def held(self) -> set[str]:
        return {w for w in self.tasks if self.holding(w)}

    def hold(self, queue: WorkQueue, item: Hold) -> None:
        if self.holding(item.work_id):
            return
        self.outcomes.pop(item.work_id, None)
        task = asyncio.create_task(self._beat(queue, item), name=f"memsync-lease-{item.work_id}")
        self.tasks[item.work_id] = task
        task.add_done_callback(functools.partial(self._done, item.work_id))

    def _done(self, work_id: str, task: asyncio.Task[str]) -> None:
        if task.cancelled():
            outcome = "released"
        elif (error := task.exception()) is not None:
            logger.error(
                "holding the work item's lease ended with an error",
                extra=self.fields(work_id=work_id, error=repr(error)),
            )
            outcome = "lost"
        else:
            outcome = task.result()
        self.outcomes[work_id] = outcome
        metrics.LEASES_RELEASED.labels(outcome=outcome).inc()
        if self.tasks.get(work_id) is task:
            del self.tasks[work_id]

    async def release(self, work_id: str) -> None:
        task = self.tasks.get(work_id)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        for work_id in list(self.tasks):
            await self.release(work_id)

    async def _beat(self, queue: WorkQueue, item: Hold) -> str:
        fields = self.fields(work_id=item.work_id, session_id=item.session_id)
        client = queue.item_client(item.sessions_token)
        outcome = "released"
        try:
            outcome = await self._beat_with(queue, client, item, fields)
            return outcome
        finally:
            self.values.pop(item.work_id, None)
            await client.close()
            if outcome in ENDED:
                await self._record(item, None, fields)

    async def _record(self, item: Hold, value: str | None, fields: dict[str, Any]) -> None:
        """Keep the held value where a new leader finds it; a failure is only logged (the next beat tries
        again)."""
        try:
            await self.record(item, value)
        except Exception as exc:
            logger.warning(
                "could not record the held work item's heartbeat", extra={**fields, "error": str(exc)}
            )

    async def _beat_with(
        self, queue: WorkQueue, client: anthropic.AsyncAnthropic, item: Hold, fields: dict[str, Any]
    ) -> str:
        last, ttl = item.resume_from or lease.NO_HEARTBEAT, lease.ASSUMED_TTL_S
        last_ok = self.monotonic()
        until = None if item.deadline_s is None else last_ok + item.deadline_s
        while True:
            if until is not None and self.monotonic() >= until:
                logger.warning(
                    "the held work item's session did not start within its start deadline: no heartbeats "
                    "past it",
                    extra={**fields, "deadline_s": item.deadline_s},
                )
                return EXPIRED
            try:
                beat = await queue.heartbeat(client, item.work_id, last)
            except QueueError as exc:
                if exc.status == 412:
                    return self._refused(item, exc, fields)
                if exc.fatal:
                    logger.error("holding the work item's lease failed", extra={**fields, "error": str(exc)})
                    return "lost"
                if self.monotonic() - last_ok > ttl:
                    logger.error(
                        "no heartbeat of the held work item was answered within its TTL: lease assumed lost",
                        extra={**fields, "error": str(exc)},
                    )
                    return "lost"
                logger.warning("heartbeat of a held work item failed", extra={**fields, "error": str(exc)})
                await asyncio.sleep(_pause(lease.operator_interval(ttl), until, self.monotonic()))
                continue
            last, last_ok = str(beat.get("last_heartbeat") or ""), self.monotonic()
            self.values[item.work_id] = last
            if isinstance(beat.get("ttl_seconds"), int) and beat["ttl_seconds"] > 0:
                ttl = float(beat["ttl_seconds"])
            if beat.get("state") in ("stopping", "stopped") or not beat.get("lease_extended"):
                logger.info(
                    "the held work item is stopping: the operator lets it go",
                    extra={**fields, "state": beat.get("state")},
                )
                return "stopping"
            await self._record(item, last, fields)
            await asyncio.sleep(_pause(lease.operator_interval(ttl), until, self.monotonic()))

    def _refused(self, item: Hold, exc: QueueError, fields: dict[str, Any]) -> str:
        if lease.takeover_value(exc.lease) is None:
            logger.error(
                "the held work item's lease was lost before the runner took it over",
                extra={**fields, "server_state": exc.lease.state if exc.lease else None},
            )
            return "lost"
        gap = lease.handover_gap(item.acknowledged_at, exc.lease.last_heartbeat if exc.lease else None)
        if gap is not None:
            metrics.HANDOVER_SECONDS.observe(gap)
        logger.info("the runner took the work item's lease over", extra={**fields, "handover_s": gap})
        return "taken_over"


def _pause(interval: float, until: float | None, now: float) -> float:
    """The next heartbeat's wait, never past the start deadline ``until`` (monotonic)."""
    return interval if until is None else max(0.0, min(interval, until - now))
