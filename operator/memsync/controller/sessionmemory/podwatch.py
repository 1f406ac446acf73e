"""The Pod watcher: each Pod event's state is remembered, and the status derived from the latest one.

The kopf handler (``registry.py``) remembers the Pod's digest and returns at once (kopf then drops the Pod's
body); ``derive_later`` derives and writes the status once per session however many events arrived while
it waited for a handler slot (``controller/coalescing.py``). kopf does not retry event handlers, so a
write that fails is logged, and the next event of the Pod (or the periodic re-check) derives it again. The
last state of each Pod is kept, so a Pod that is gone is judged by what it last reported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from memsync.controller.kube import KubeApiError
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.ownership import owner_name, owner_uid
from memsync.controller.sessionmemory.reconcile import reconcile
from memsync.controller.sessionmemory.record import record_pod
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.crd.models import API_VERSION, KIND

logger = logging.getLogger(__name__)


def see_pod_event(state: SessionMemories, event_type: str | None, pod: Mapping[str, Any]) -> ObjectRef | None:
    """Remember one Pod event's state for its owner (ADDED/MODIFIED/DELETED or the initial listing); the
    owner, or None for a Pod no SessionMemory controls.

    Remembered before any write: if the write fails, the re-check and the delete handler still know."""
    uid = owner_uid(pod)
    name = owner_name(pod)
    namespace = meta_of(pod).namespace
    if uid is None or name is None or not namespace:
        return None
    state.see_pod(namespace, name, uid, pod, gone=event_type == "DELETED")
    return ObjectRef(namespace, name, uid)


async def derive_from_seen_pod(state: SessionMemories, ref: ObjectRef) -> None:
    """Derive SessionMemory ``ref``'s status from the last Pod state the watcher saw, and write it; when
    that ended an interrupted Pod of a session that restarts, its next Pod is started at once."""
    seen = state.last_seen(ref.namespace, ref.name)
    if seen is None:
        return
    owner = ref._replace(uid=seen.owner_uid)
    written = await record_pod(state, owner, seen.pod, pod_gone=seen.gone)
    if written is None:
        state.unsee(ref.namespace, ref.name, seen)  # the SessionMemory is gone: nothing to remember it for
    elif ph.ready_reason(written) == ph.RESTARTING:
        await reconcile(state, owner.as_body(API_VERSION, KIND))


async def derive_later(state: SessionMemories, ref: ObjectRef) -> None:
    """``derive_from_seen_pod`` in a handler slot, run by ``SessionMemories.pod_updates`` for the Pod
    watcher. kopf does not retry event handlers: a write that fails is logged, and the next event of the
    Pod (or the periodic re-check) derives the status again."""
    try:
        async with state.slots:
            await derive_from_seen_pod(state, ref)
    except (KubeApiError, kopf.TemporaryError) as exc:
        logger.warning(
            "could not record a Pod event",
            extra={"namespace": ref.namespace, "sessionmemory": ref.name, "error": str(exc)},
        )
