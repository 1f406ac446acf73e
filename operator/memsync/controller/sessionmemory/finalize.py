"""Deletion (memsync's own finalizer): end the sandbox Pod gracefully, make the outcome final, release.

The Pod is deleted with its own grace period so the sidecar's preStop and SIGTERM flushes run; the handler
re-checks until it is gone (bounded by the Pod's grace period plus ``delete_extra_seconds``; past the bound
it warns ``FlushNotConfirmed``, records ``DeletionTimedOut`` and releases), records the Pod's end from the
last state the watcher saw (waiting briefly for the watcher's DELETED event when it has not arrived yet;
with no state at all the flush is recorded as not reported), and releases the object.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from memsync.controller.conditions import condition
from memsync.controller.kube import KubeApiError, refusal_message
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.ownership import owner_uid
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.controller.sessionmemory.record import record_gone_pod, record_lost_pod, record_pod
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.sessionmemory.writer import post_event

logger = logging.getLogger(__name__)


def grace_seconds(pod: Mapping[str, Any], default: float) -> float:
    meta_grace = meta_of(pod).deletion_grace_period_seconds
    spec_grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    for value in (meta_grace, spec_grace):
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return default


async def finalize(state: SessionMemories, body: Mapping[str, Any], elapsed: float) -> None:
    """Delete the Pod gracefully, wait (bounded) until it is gone, make the outcome final; then release.

    Raises kopf.TemporaryError to be called again while the Pod is still flushing.
    """
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    current = await state.read(namespace, name)
    if current is None or meta_of(current).uid != uid:
        state.forget(namespace, name)
        return
    status: Mapping[str, Any] = current.get("status") or {}
    pod_name = str(status.get("podName") or pod_name_for(name))

    try:
        pod = await state.kube.get_pod(namespace, pod_name)
        if pod is not None and owner_uid(pod) == uid:
            await _end_pod(state, body, pod, elapsed)
        elif status.get("podName") and not ph.is_refusal(status):
            await _settle_gone_pod(state, body, status, pod_name)
    except KubeApiError as exc:
        if exc.status != 403:
            raise
        await _release_without_access(state, body, status, pod_name, exc)
    logger.info("SessionMemory released", extra={"namespace": namespace, "sessionmemory": name})
    state.forget(namespace, name)


async def _end_pod(
    state: SessionMemories, body: Mapping[str, Any], pod: Mapping[str, Any], elapsed: float
) -> None:
    """The Pod is still there: delete it (once) and wait while within the bound (a kopf retry); past the
    bound give up on it, recording ``DeletionTimedOut``."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    pod_name = str(meta_of(pod).name)
    config = state.config
    bound = config.delete_timeout_seconds
    if bound is None:
        bound = grace_seconds(pod, config.default_grace_seconds) + config.delete_extra_seconds
    if elapsed <= bound:
        if not meta_of(pod).deletion_timestamp:
            pod_uid = meta_of(pod).uid
            await state.kube.delete_pod(namespace, pod_name, uid=str(pod_uid) if pod_uid else None)
            logger.info(
                "deleting the sandbox Pod; its sidecar flushes the stores",
                extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name},
            )
            await post_event(
                state,
                body,
                "Normal",
                "DeletingPod",
                f"deleting sandbox Pod {pod_name} with its grace period; memsync-sync flushes the stores",
            )
        await record_pod(state, ObjectRef(namespace, name, uid), pod)
        raise kopf.TemporaryError(
            f"waiting for sandbox Pod {pod_name} to end", delay=config.delete_recheck_delay
        )
    message = (
        f"sandbox Pod {pod_name} did not end within {bound:.0f}s; releasing the SessionMemory without "
        "a confirmed final flush (the Pod is left to Kubernetes' garbage collector)"
    )
    logger.warning(message, extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name})
    await post_event(state, body, "Warning", "FlushNotConfirmed", message)
    await record_lost_pod(
        state,
        ObjectRef(namespace, name, uid),
        pod_name,
        reason=ph.DELETION_TIMED_OUT,
        why=f"the deletion gave up waiting for sandbox Pod {pod_name} after {bound:.0f}s",
    )


async def _release_without_access(
    state: SessionMemories,
    body: Mapping[str, Any],
    status: Mapping[str, Any],
    pod_name: str,
    exc: KubeApiError,
) -> None:
    """The API forbids the operator the namespace's Pods (namespaced RBAC, and the namespace is being
    deleted: its RoleBinding went first). The Pod ends with the namespace, with its grace period, so its
    final flush runs; the operator cannot see it end, so it records that and releases the SessionMemory
    rather than hold the namespace's deletion for ever."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    why = (
        f"the operator may no longer read sandbox Pod {pod_name} ({refusal_message(exc)}): its grants in "
        f"namespace {namespace} are gone (is the namespace being deleted?); the Pod ends with its grace "
        "period and its final flush runs, unconfirmed"
    )
    logger.warning(
        "releasing a SessionMemory whose Pod the operator may no longer see",
        extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name, "error": str(exc)},
    )
    if status.get("phase") in ph.TERMINAL_PHASES or not status.get("podName"):
        return
    try:
        await record_lost_pod(
            state, ObjectRef(namespace, name, uid), pod_name, reason=ph.NAMESPACE_ACCESS_LOST, why=why
        )
    except KubeApiError as write_error:  # no grant on the status either: the release still goes on
        logger.warning("cannot record the release", extra={"namespace": namespace, "error": str(write_error)})


async def _settle_gone_pod(
    state: SessionMemories, body: Mapping[str, Any], status: Mapping[str, Any], pod_name: str
) -> None:
    """The session's Pod is gone: record its outcome when it is not recorded yet, and warn when the final
    flush is not confirmed."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    config = state.config
    if status.get("phase") not in ph.TERMINAL_PHASES:
        # The Pod is gone but its outcome is not recorded yet (the watcher's write may have failed,
        # or its DELETED event is still on the way: then give it a moment).
        seen = state.seen_pod(namespace, name, uid, pod_name)
        if seen is None or not seen.gone:
            gone_since = state.gone_since(namespace, name, time.monotonic())
            if time.monotonic() - gone_since < config.report_settle_seconds:
                raise kopf.TemporaryError(
                    f"sandbox Pod {pod_name} is gone; waiting for its final report",
                    delay=min(1.0, config.delete_recheck_delay),
                )
        await record_gone_pod(state, ObjectRef(namespace, name, uid), pod_name)
    final = (await state.kube.get_session_memory(namespace, name) or {}).get("status") or {}
    flushed = condition(final, ph.FLUSHED) or {}
    if flushed.get("status") != "True":
        await post_event(
            state,
            body,
            "Warning",
            "FlushNotConfirmed",
            f"released without a confirmed final flush: {flushed.get('message') or 'no report'}",
        )
