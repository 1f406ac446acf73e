"""A session on its way to a running sandbox: its start deadline, and its waits without a Pod of its own.

The decisions are ``waiting.py``'s; this module reads the clock and the spec, writes the status and deletes
a Pod that timed out. A wait (a quota or a LimitRange that refused the Pod, an earlier Pod of the same name)
is written once as ``Pending`` with its reason (a Warning Event), then retried with a backoff (2, 4, 8 ... s
up to the re-check interval: ``kopf.TemporaryError``) until the start deadline turns it into
``StartTimeout``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory import waiting
from memsync.controller.sessionmemory.digest import StorePaths
from memsync.controller.sessionmemory.record import record_start_timeout, record_waiting
from memsync.controller.sessionmemory.state import SessionMemories

logger = logging.getLogger(__name__)


def _ref(body: Mapping[str, Any]) -> ObjectRef:
    meta = meta_of(body)
    return ObjectRef(str(meta.namespace), str(meta.name), str(meta.uid))


def deadline_seconds(state: SessionMemories, body: Mapping[str, Any]) -> float:
    spec = body.get("spec")
    return waiting.start_deadline_seconds(
        spec if isinstance(spec, Mapping) else {}, state.config.start_deadline
    )


async def timed_out(
    state: SessionMemories,
    body: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    *,
    stores: StorePaths | None = None,
) -> bool:
    """Fail the session with ``StartTimeout`` (and delete ``pod``, its Pod of this attempt) when its start
    deadline passed and the sandbox never ran; True when it did."""
    status: Mapping[str, Any] = body.get("status") or {}
    if status.get("phase") in ph.TERMINAL_PHASES and not ph.is_refusal(status):
        return False
    seconds = deadline_seconds(state, body)
    created = meta_of(body).creation_timestamp
    message = waiting.start_overdue(
        pod, status, created=str(created) if created else None, now=state.clock(), seconds=seconds
    )
    if message is None:
        return False
    ref = _ref(body)
    pod_meta = meta_of(pod) if pod is not None else None
    pod_name = str(pod_meta.name) if pod_meta is not None else None
    logger.warning(
        "the sandbox did not start within the start deadline; failing the session",
        extra={"namespace": ref.namespace, "sessionmemory": ref.name, "pod": pod_name, "deadline_s": seconds},
    )
    await record_start_timeout(state, ref, message, pod_name=pod_name or status.get("podName"), stores=stores)
    state.wait_over(ref.namespace, ref.name)
    if pod_meta is not None and pod_name is not None:
        uid = pod_meta.uid
        await state.kube.delete_pod(ref.namespace, pod_name, uid=str(uid) if uid else None)
    return True


async def wait_without_pod(
    state: SessionMemories,
    body: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    stores: StorePaths | None = None,
) -> None:
    """The session waits for ``reason`` (``phases.WAITING_REASONS``): written as ``Pending`` and retried
    with a backoff (``kopf.TemporaryError``), unless its start deadline has passed (then ``StartTimeout``)."""
    ref = _ref(body)
    status: Mapping[str, Any] = body.get("status") or {}
    if ph.is_waiting(status) and await timed_out(state, body, None, stores=stores):
        return None
    seconds = deadline_seconds(state, body)
    due = waiting.deadline(str(meta_of(body).creation_timestamp or ""), status, seconds)
    until = f" until the start deadline ({due:%Y-%m-%dT%H:%M:%SZ})" if due is not None else ""
    written = await record_waiting(state, ref, reason, f"{message}; retried{until}", stores=stores)
    if written is not None and not ph.is_waiting(written):
        return None  # an outcome was recorded meanwhile: nothing to wait for
    delay = waiting.backoff_seconds(state.waited(ref.namespace, ref.name), state.config.recheck_interval)
    raise kopf.TemporaryError(f"{reason}: {message}", delay=delay)
