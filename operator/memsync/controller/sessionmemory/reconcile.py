"""Reconcile a SessionMemory: create, resume (operator restart), spec updates and the periodic re-check.

One reconcile reads the world, decides with pure functions, and converges; running it twice changes
nothing the second time (the steps are told in the package's docstring, ``__init__.py``). A spec update
after a Pod exists cannot reach it (a Pod's containers and environment are immutable):
``note_spec_change`` records the new generation as observed and posts a ``SpecChangeNotApplied`` warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from memsync.controller import metrics, waits
from memsync.controller.kube import (
    KubeAlreadyExists,
    KubeApiError,
    is_missing_service_account,
    is_refusal,
    refusal_message,
)
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.periodic import needs_recheck
from memsync.controller.sessionmemory import derive
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status
from memsync.controller.sessionmemory.digest import StorePaths, paths_of
from memsync.controller.sessionmemory.outcome import sidecar_start_overdue
from memsync.controller.sessionmemory.ownership import Claims, owner_uid, senior_duplicate
from memsync.controller.sessionmemory.pod import build_sandbox_pod, pod_name_for
from memsync.controller.sessionmemory.record import record_gone_pod, record_lost_pod, record_pod, refuse
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.sessionmemory.writer import generation_of, post_event, write_status
from memsync.crd.models import SessionMemorySpec, validate_spec
from memsync.crd.spec_messages import InvalidSpecError

logger = logging.getLogger(__name__)


async def adopt_or_refuse(
    state: SessionMemories,
    body: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    created: bool,
    stores: StorePaths | None = None,
) -> None:
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    pod_name = str(meta_of(pod).name)
    if owner_uid(pod) != uid:
        status: Mapping[str, Any] = body.get("status") or {}
        if status.get("podName") and not ph.is_refusal(status):
            # Our Pod is gone and another took its name: the session is over.
            await record_gone_pod(
                state, ObjectRef(namespace, name, uid), str(status["podName"]), stores=stores
            )
            return
        await refuse(
            state,
            namespace,
            name,
            ph.POD_NAME_TAKEN,
            f"a Pod named {pod_name} already exists in {namespace} and is not owned by this SessionMemory; "
            "delete that Pod or rename the SessionMemory",
            stores=stores,
        )
        return
    if state.first_sight(str(meta_of(pod).uid or pod_name)):
        verb = "created" if created else "adopted"
        (metrics.PODS_CREATED if created else metrics.PODS_ADOPTED).inc()
        logger.info(
            f"sandbox Pod {verb}", extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name}
        )
        await post_event(
            state,
            body,
            "Normal",
            "PodCreated" if created else "PodAdopted",
            f"sandbox Pod {pod_name} {verb}",
        )
    timeout = sidecar_start_seconds(body, state.config.sidecar_start_timeout)
    stuck = sidecar_start_overdue(pod, state.clock(), timeout)
    if stuck is None:
        await record_pod(state, ObjectRef(namespace, name, uid), pod, stores=stores)
        return
    logger.warning(
        "memsync-sync never started; failing the session and deleting its Pod",
        extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name, "timeout_s": timeout},
    )
    await record_lost_pod(
        state,
        ObjectRef(namespace, name, uid),
        pod_name,
        reason=ph.SIDECAR_NOT_STARTED,
        why=stuck,
        never_ran=True,
        stores=stores,
    )
    real_uid = meta_of(pod).uid
    await state.kube.delete_pod(namespace, pod_name, uid=str(real_uid) if real_uid else None)


async def reconcile(
    state: SessionMemories, event_body: Mapping[str, Any], claims: Claims | None = None
) -> None:
    """Converge one SessionMemory (see the package's docstring). Idempotent.

    The decision is taken on the object as the API serves it now, not on the (possibly older) body of the
    event that triggered it: a status that already names a Pod must never be missed, or a session whose
    Pod vanished could get a second one. ``claims``: the operator's index of sessions (the handlers pass
    it); without it the namespace's SessionMemories are listed.
    """
    meta = meta_of(event_body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    body = await state.read(namespace, name)
    if body is None or meta_of(body).uid != uid:
        return  # deleted meanwhile (or replaced by a new object of the same name, handled on its own)
    if meta_of(body).deletion_timestamp:
        return  # the delete handler owns the object from here
    status: Mapping[str, Any] = body.get("status") or {}

    # The spec is validated once here; every status written below reuses the store paths it gave.
    raw_spec: Mapping[str, Any] = body.get("spec") or {}
    invalid: InvalidSpecError | None = None
    try:
        valid: SessionMemorySpec | None = validate_spec(raw_spec)
    except InvalidSpecError as exc:
        valid, invalid = None, exc
    stores = paths_of(valid, raw_spec)

    # A SessionMemory never reconciled (no status) and whose Pod the watcher has not seen gets no read of
    # its Pod: the create below answers 409 if one exists after all, and that Pod is then read and adopted.
    seen = state.last_seen(namespace, name) is not None
    pod = await state.kube.get_pod(namespace, pod_name_for(name)) if status or seen else None
    if pod is not None:
        await adopt_or_refuse(state, body, pod, created=False, stores=stores)
        return
    if status.get("podName") and not ph.is_refusal(status):
        # The session had its Pod and the Pod is gone: it does not get a second one.
        await record_gone_pod(state, ObjectRef(namespace, name, uid), str(status["podName"]), stores=stores)
        return

    if valid is None:
        refusal: tuple[str, str] | None = (ph.INVALID_SPEC, f"the spec is invalid: {invalid}")
    else:
        refusal = await _refusal(state, body, valid, claims)
    if refusal is not None:
        await refuse(state, namespace, name, *refusal, stores=stores)
        return
    assert valid is not None
    await _create_pod(state, body, valid, stores)


async def _refusal(
    state: SessionMemories, body: Mapping[str, Any], spec: SessionMemorySpec, claims: Claims | None
) -> tuple[str, str] | None:
    """(reason, message) of a refusal before any Pod for a valid spec: an older duplicate of the session,
    a Secret or key that is missing or that the operator may not read; None when the Pod may be created."""
    meta = meta_of(body)
    namespace, kube = str(meta.namespace), state.kube
    peers = (
        claims(namespace, spec.session_id)
        if claims is not None
        else await kube.list_session_memories(namespace)
    )
    senior = senior_duplicate(body, peers)
    if senior is not None:
        return (
            ph.DUPLICATE_SESSION,
            f"SessionMemory {meta_of(senior).name} already holds session {spec.session_id} in namespace "
            f"{namespace}: one SessionMemory per session; this one starts no Pod while that one exists",
        )
    ref = spec.work_item_secret_ref
    try:
        keys = await kube.secret_keys(namespace, ref.name)
    except KubeApiError as exc:
        if not is_refusal(exc):
            raise
        return (
            ph.SECRET_FORBIDDEN,
            f"the API refused to let the operator read Secret {ref.name} (spec.workItemSecretRef.name): "
            f"{refusal_message(exc)}; no Pod was created (re-checked periodically)",
        )
    if keys is None:
        return (
            ph.SECRET_NOT_FOUND,
            f"Secret {ref.name} (spec.workItemSecretRef.name) does not exist in namespace {namespace}; "
            "the session never starts without its memory, so no Pod was created (re-checked periodically)",
        )
    if ref.key not in keys:
        return (
            ph.SECRET_KEY_NOT_FOUND,
            f"Secret {ref.name} has no key {ref.key} (spec.workItemSecretRef.key); "
            "the session never starts without its memory, so no Pod was created (re-checked periodically)",
        )
    return None


async def _create_pod(
    state: SessionMemories, body: Mapping[str, Any], spec: SessionMemorySpec, stores: StorePaths
) -> None:
    """Build the sandbox Pod and create it; adopt it when it exists already, refuse what the API refuses."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    pod_name = pod_name_for(name)
    config = state.config
    try:
        manifest = build_sandbox_pod(
            name=name,
            namespace=namespace,
            uid=uid,
            spec=spec,
            agent_image=config.agent_image,
            agent_image_pull_policy=config.agent_image_pull_policy,
            memsync_env_defaults=config.memsync_env,
            memory_volume_size_limit=config.memory_volume_size_limit,
        )
    except ValueError as exc:
        await refuse(state, namespace, name, ph.INVALID_SPEC, f"the spec is invalid: {exc}", stores=stores)
        return
    try:
        created = await state.kube.create_pod(namespace, manifest)
    except KubeAlreadyExists:
        existing = await state.kube.get_pod(namespace, pod_name)
        if existing is None:
            raise kopf.TemporaryError(f"Pod {pod_name} existed and vanished; retrying", delay=1) from None
        await adopt_or_refuse(state, body, existing, created=False, stores=stores)
        return
    except KubeApiError as exc:
        if is_missing_service_account(exc):
            raw_spec: Mapping[str, Any] = body.get("spec") or {}
            await _wait_for_service_account(
                state, namespace=namespace, name=name, raw_spec=raw_spec, exc=exc, stores=stores
            )
            return
        if not is_refusal(exc):
            raise
        message = f"the API refused sandbox Pod {pod_name}: {refusal_message(exc)} (re-checked periodically)"
        await refuse(state, namespace, name, ph.POD_REJECTED, message, stores=stores)
        return
    state.service_account_found(namespace, name)
    await adopt_or_refuse(state, body, created, created=True, stores=stores)


async def _wait_for_service_account(
    state: SessionMemories,
    *,
    namespace: str,
    name: str,
    raw_spec: Mapping[str, Any],
    exc: KubeApiError,
    stores: StorePaths,
) -> None:
    """The Pod's ServiceAccount does not exist: retried (``exc`` re-raised) until the configured wait since
    the first such answer is over, then the refusal ``ServiceAccountNotFound``."""
    now = time.monotonic()
    first = state.service_account_missing_since(namespace, name, now)
    wait = state.config.service_account_wait
    if not waits.wait_is_over(first, now, wait):
        raise exc
    message = waits.missing_service_account_message(waits.service_account_of(raw_spec), namespace, wait)
    await refuse(
        state,
        namespace,
        name,
        ph.SERVICE_ACCOUNT_NOT_FOUND,
        f"{message}: {refusal_message(exc)}",
        stores=stores,
    )


async def recheck(
    state: SessionMemories, event_body: Mapping[str, Any], claims: Claims | None = None
) -> None:
    """The periodic re-check. A session with its Pod and no outcome yet is checked against its Pod alone,
    from the SessionMemory as this process last read or wrote it (only this operator writes the status, so
    that copy's status is current; a write it makes still carries that copy's resourceVersion): the Pod as
    the watcher saw it within ``pod_reread_interval`` (else it is read), and a gone Pod is recorded from the
    watcher's last view. Anything else (a refusal, which needs the
    spec; an object this process holds no copy of) is reconciled in full."""
    meta = meta_of(event_body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    known = state.known(namespace, name, uid)
    status: Mapping[str, Any] = (known or {}).get("status") or {}
    active = needs_recheck(status) and not ph.is_refusal(status)
    if known is None or not active or meta_of(known).deletion_timestamp:
        await reconcile(state, event_body, claims)
        return
    pod_name = str(status["podName"])
    # The Pod as the watcher saw it lately (kopf's watch of Pods delivers every change, and the liveness probe
    # fails when a watch stalls), so a running fleet costs few reads; read when it saw none lately (a missed
    # event is repaired within ``pod_reread_interval``).
    seen = state.seen_pod(namespace, name, uid, pod_name)
    fresh = (
        seen is not None and not seen.gone and time.monotonic() - seen.at < state.config.pod_reread_interval
    )
    pod = seen.pod if fresh and seen is not None else await state.kube.get_pod(namespace, pod_name)
    if pod is None:
        await record_gone_pod(state, ObjectRef(namespace, name, uid), pod_name)
    else:
        await adopt_or_refuse(state, known, pod, created=False)


def sidecar_start_seconds(body: Mapping[str, Any], default: float) -> float:
    """The SessionMemory's ``spec.sync.sidecarStartSeconds``, else the operator's default."""
    sync = (body.get("spec") or {}).get("sync") or {}
    value = sync.get("sidecarStartSeconds") if isinstance(sync, Mapping) else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else default


async def note_spec_change(
    state: SessionMemories, body: Mapping[str, Any], claims: Claims | None = None
) -> None:
    """A spec update: before any Pod it is reconciled; once a Pod exists it cannot reach the Pod."""
    meta = meta_of(body)
    status: Mapping[str, Any] = body.get("status") or {}
    if meta.deletion_timestamp:
        return
    if not status.get("podName") or ph.is_refusal(status):
        await reconcile(state, body, claims)
        return
    namespace, name = str(meta.namespace), str(meta.name)
    generation = generation_of(body)
    pod_name = str(status["podName"])
    message = (
        f"spec changed (generation {generation}) but sandbox Pod {pod_name} is immutable: the change applies "
        "only to a new SessionMemory"
    )
    logger.warning(message, extra={"namespace": namespace, "sessionmemory": name})
    await post_event(state, body, "Warning", "SpecChangeNotApplied", message)

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        return derive.with_generation(previous, generation_of(obj))

    state.drop_known(namespace, name)  # the new generation is read, never assumed
    await write_status(state, namespace, name, compute)
