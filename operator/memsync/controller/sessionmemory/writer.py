"""The one status write of a SessionMemory: a read-modify-write with its Events.

Every status change goes through ``write_status``: it computes the new status with a pure function from the
object as this process last read or wrote it, patches what changed with a resourceVersion precondition
(retried on conflict) under a per-object lock, and posts a Kubernetes Event when the phase (or the reason
of a failure) changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

import kopf

from memsync.controller import events, metrics
from memsync.controller.conditions import condition
from memsync.controller.kube import KubeConflict, KubeNotFound
from memsync.controller.objects import meta_of
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status, status_changes
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.settings import EVENT_COMPONENT
from memsync.crd.models import API_VERSION, KIND

logger = logging.getLogger(__name__)

STATUS_WRITE_ATTEMPTS: Final = 8

#: ``compute(obj, previous_status)``: the complete new status (None: leave it). Pure.
Compute = Callable[[Mapping[str, Any], Status], Status | None]


def generation_of(obj: Mapping[str, Any]) -> int | None:
    return meta_of(obj).generation


def announcement(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(event type, reason, message) when the phase, the reason of a failure, or what a session without a
    Pod waits for (a quota, a restart) changed; else None."""
    old_phase, new_phase = old.get("phase"), new.get("phase")
    old_ready = condition(old, ph.READY) or {}
    new_ready = condition(new, ph.READY) or {}
    reason_changed = old_ready.get("reason") != new_ready.get("reason")
    waits = ph.is_waiting(new)
    if old_phase == new_phase and not (reason_changed and (new_phase == ph.FAILED or waits)):
        return None
    message = str(new.get("message") or "")
    if new_phase == ph.FAILED or waits:
        return "Warning", str(new_ready.get("reason") or ph.FAILED), message
    if new_phase == ph.SUCCEEDED:
        return "Normal", ph.SUCCEEDED, message
    return "Normal", str(new_phase), message


async def post_event(
    state: SessionMemories, obj: Mapping[str, Any], type_: str, reason: str, message: str
) -> None:
    ref = {
        "apiVersion": obj.get("apiVersion") or API_VERSION,
        "kind": obj.get("kind") or KIND,
        "metadata": meta_of(obj).reference(),
    }
    await events.post(state.kube, ref, type_, reason, message, component=EVENT_COMPONENT, now=state.clock())


async def write_status(
    state: SessionMemories, namespace: str, name: str, compute: Compute, *, uid: str | None = None
) -> Status | None:
    """Compute the SessionMemory's new status, patch it if it changed; announce phase changes.

    ``compute(obj, previous_status)`` is pure and returns the complete new status (None: leave it). The
    first attempt starts from the object as this process last read or wrote it (``SessionMemories.known``,
    when it is the one with ``uid``): only this operator writes the status, under this lock, so its status is
    current. The patch carries that object's resourceVersion, so any newer change (a concurrent writer, a
    spec update, kopf's own annotations) makes it fail with a conflict instead of being overwritten; the
    status is then recomputed from a fresh read.
    """
    async with state.lock(namespace, name):
        for attempt in range(STATUS_WRITE_ATTEMPTS):
            obj = state.known(namespace, name, uid) if attempt == 0 else None
            if obj is None:
                obj = await state.read(namespace, name)
            if obj is None:
                return None
            previous = cast(Status, dict(obj.get("status") or {}))
            new = compute(obj, previous)
            if new is None or new == previous:
                return previous
            patch = status_changes(previous, new)
            rv = meta_of(obj).resource_version
            try:
                written = await state.kube.patch_session_memory_status(
                    namespace, name, patch, resource_version=rv
                )
            except (KubeConflict, KubeNotFound):
                state.drop_known(namespace, name)
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0) if attempt else 0)
                continue
            state.remember(namespace, name, written)
            await _announce(state, obj, previous, new)
            return new
    raise kopf.TemporaryError(f"the status of {namespace}/{name} kept changing while it was written", delay=1)


async def _announce(
    state: SessionMemories, obj: Mapping[str, Any], previous: Mapping[str, Any], new: Mapping[str, Any]
) -> None:
    """Count, log and post (as an Event) a change of phase or of the reason of a failure."""
    news = announcement(previous, new)
    if news is None:
        return
    type_, reason, message = news
    metrics.PHASE_CHANGES.labels(phase=str(new.get("phase")), reason=reason).inc()
    flushed = condition(new, ph.FLUSHED) or {}
    if new.get("phase") in ph.TERMINAL_PHASES and flushed.get("reason") in (
        ph.FLUSH_INCOMPLETE,
        ph.FLUSH_NOT_REPORTED,
    ):
        metrics.FLUSH_UNCONFIRMED.labels(reason=str(flushed["reason"])).inc()
    meta = meta_of(obj)
    logger.info(
        "SessionMemory phase changed",
        extra={
            "namespace": meta.namespace,
            "sessionmemory": meta.name,
            "phase": new.get("phase"),
            "reason": reason,
        },
    )
    await post_event(state, obj, type_, reason, message)
