"""The periodic work of the operator, in one loop instead of a kopf timer per SessionMemory.

Two kinds of work follow each SessionMemory while its status asks for them (``jobs_of``, a kopf index kept
from the operator's own watch, so it follows every status change and deletion):

- a job, ``recheck``, runs every ``recheck_interval`` (first one interval after the status asked for it): a
  refusal is re-evaluated, an active session is checked against its Pod;
- a follower, ``sync-health``, is told every round which sessions want it and keeps one watch running for
  each (``sessionmemory/health.py``: the sidecar's sync health of a running session).

A kopf timer per object would hold, per SessionMemory, a task and the object's last full body (kopf keeps it
for its timers: at 1,000 SessionMemories about 90 MB of the operator's memory). Here each job is one entry
in a schedule (``Schedule``, pure bookkeeping) and the index holds a (namespace, name, uid) per job. The
loop starts with the operator and waits until kopf has indexed every SessionMemory (the re-check's duplicate
check needs the whole index); a run of one object never overlaps the next run of the same object, and a
failed run is retried after the delay its error asks for.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from memsync.controller import metrics
from memsync.controller.conditions import now_utc
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory import phases as ph
from memsync.crd.spec_messages import plain

logger = logging.getLogger(__name__)

RECHECK: Final = "recheck"
HEALTH: Final = "sync-health"
#: Not a job: SessionMemories with no status yet, by creation time (counted for an alert).
UNSTARTED: Final = "no-status"
#: How long a SessionMemory may have no status before it counts as waiting too long (the metric).
NO_STATUS_GRACE_S: Final = 120.0
#: What one job does for one SessionMemory.
Action = Callable[[ObjectRef], Awaitable[None]]


def needs_recheck(status: Mapping[str, Any]) -> bool:
    """Refused before its Pod (the cause may be fixed), waiting without a Pod (a quota may free up, a start
    deadline runs), a Pod and no outcome yet (a write may be lost), or a Pod left on a lost node (it may be
    force-deleted)."""
    if ph.is_refusal(status) or ph.is_waiting(status):
        return True
    if ph.ready_reason(status) == ph.NODE_LOST:
        return bool(status.get("podName"))
    return bool(status.get("podName")) and status.get("phase") not in ph.TERMINAL_PHASES


def is_running(status: Mapping[str, Any]) -> bool:
    return status.get("phase") == ph.RUNNING and bool(status.get("podName"))


def jobs_of(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The periodic jobs a SessionMemory asks for now (kopf's index function: job -> its reference), and
    ``UNSTARTED`` -> its creation time while it has no status."""
    meta = meta_of(body)
    if meta.deletion_timestamp or not meta.namespace or not meta.name or not meta.uid:
        return None  # the deletion owns it from here (kopf stopped its timers too)
    status = plain(body.get("status") or {})
    ref = ObjectRef(meta.namespace, meta.name, meta.uid)
    jobs: dict[str, Any] = {
        job: ref for job, wanted in ((RECHECK, needs_recheck), (HEALTH, is_running)) if wanted(status)
    }
    if not status.get("phase") and meta.creation_timestamp:
        jobs[UNSTARTED] = meta.creation_timestamp
    return jobs or None


def waiting_too_long(created: Iterable[str], now: datetime.datetime, grace: float = NO_STATUS_GRACE_S) -> int:
    """How many of the creation times (RFC 3339) are older than ``grace`` seconds at ``now``."""
    count = 0
    for stamp in created:
        try:
            when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            continue
        if (now - when).total_seconds() > grace:
            count += 1
    return count


@dataclass
class Schedule:
    """When each SessionMemory's next run of one job is due (loop time, seconds)."""

    interval: float
    first_delay: float
    due: dict[ObjectRef, float] = field(default_factory=dict)

    def take(
        self, wanted: Iterable[ObjectRef], now: float, busy: frozenset[ObjectRef] = frozenset()
    ) -> list[ObjectRef]:
        """The references due at ``now`` (their next run is then one interval away). A reference no longer
        wanted is dropped; a newly wanted one is first due ``first_delay`` from now; a ``busy`` one (its
        run not finished yet) waits."""
        wanted = set(wanted)
        for ref in [r for r in self.due if r not in wanted]:
            del self.due[ref]
        for ref in wanted:
            self.due.setdefault(ref, now + self.first_delay)
        ready = [ref for ref, at in self.due.items() if at <= now and ref not in busy]
        for ref in ready:
            self.due[ref] = now + self.interval
        return ready

    def retry(self, ref: ObjectRef, at: float) -> None:
        if ref in self.due:
            self.due[ref] = at


@dataclass
class Job:
    name: str
    schedule: Schedule
    action: Action
    running: dict[ObjectRef, asyncio.Task[None]] = field(default_factory=dict)


async def run_jobs(
    jobs: list[Job],
    index: Mapping[str, Iterable[Any]],
    ready: asyncio.Event,
    *,
    error_delay: float,
    followers: Mapping[str, Callable[[Iterable[ObjectRef]], None]] | None = None,
    on_round: Callable[[], None] | None = None,
) -> None:
    """Run ``jobs`` over the references in ``index`` (kopf's index of ``jobs_of``) until cancelled, tell
    each of ``followers`` (by index key) which references want it, and call ``on_round`` after every round
    (the liveness probe follows them)."""
    await ready.wait()
    loop = asyncio.get_running_loop()
    tick = min(1.0, *(job.schedule.interval / 2 for job in jobs))
    try:
        while True:
            now = loop.time()
            for job in jobs:
                for ref in job.schedule.take(index.get(job.name, ()), now, frozenset(job.running)):
                    job.running[ref] = asyncio.create_task(_run_one(job, ref, error_delay))
            for name, follow in (followers or {}).items():
                follow(index.get(name, ()))
            metrics.WITHOUT_STATUS.set(waiting_too_long(index.get(UNSTARTED, ()), now_utc()))
            if on_round is not None:
                on_round()
            await asyncio.sleep(tick)
    finally:
        for job in jobs:
            for task in job.running.values():
                task.cancel()


async def _run_one(job: Job, ref: ObjectRef, error_delay: float) -> None:
    try:
        await job.action(ref)
    except kopf.TemporaryError as exc:
        job.schedule.retry(ref, asyncio.get_running_loop().time() + (exc.delay or error_delay))
    except Exception:
        logger.exception(
            "a periodic job failed; it runs again", extra={"job": job.name, "sessionmemory": ref[1]}
        )
        job.schedule.retry(ref, asyncio.get_running_loop().time() + error_delay)
    finally:
        job.running.pop(ref, None)
