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
from memsync.controller.conditions import condition
from memsync.controller.kube import (
    KubeAlreadyExists,
    KubeApiError,
    is_missing_service_account,
    is_quota_refusal,
    is_refusal,
    refusal_message,
)
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.periodic import needs_recheck
from memsync.controller.sessionmemory import derive
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status
from memsync.controller.sessionmemory.digest import StorePaths, paths_of
from memsync.controller.sessionmemory.lostnodes import check_node, force_delete_if_due, lost_node_of
from memsync.controller.sessionmemory.outcome import sidecar_start_overdue
from memsync.controller.sessionmemory.ownership import Claims, owner_name, owner_uid, senior_duplicate
from memsync.controller.sessionmemory.pod import (
    ANNOTATION_SPEC_HASH,
    build_sandbox_pod,
    pod_name_for,
    spec_hash,
)
from memsync.controller.sessionmemory.record import record_gone_pod, record_lost_pod, record_pod, refuse
from memsync.controller.sessionmemory.starting import timed_out, wait_without_pod
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.sessionmemory.writer import generation_of, post_event, write_status
from memsync.crd.models import SessionMemorySpec, validate_spec
from memsync.crd.spec_messages import InvalidSpecError

logger = logging.getLogger(__name__)


def attempt_of(status: Mapping[str, Any]) -> int:
    """The attempt the session is at: 0, then one more per restart after an interruption."""
    restarts = status.get("restarts")
    return restarts if isinstance(restarts, int) and restarts > 0 else 0


async def adopt_or_refuse(
    state: SessionMemories,
    body: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    created: bool,
    stores: StorePaths | None = None,
) -> Status | None:
    """Adopt the session's Pod of this attempt and record its state (a Pod that is not its own: refused, or
    waited for when an earlier SessionMemory of the same name left it); fail a start that is overdue and a
    sidecar that never started; judge its node. The status written, if any."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    pod_name = str(meta_of(pod).name)
    if owner_uid(pod) != uid:
        await _not_our_pod(state, body, pod, stores=stores)
        return None
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
    if await timed_out(state, body, pod, stores=stores):
        return None
    timeout = sidecar_start_seconds(body, state.config.sidecar_start_timeout)
    stuck = sidecar_start_overdue(pod, state.clock(), timeout)
    if stuck is not None:
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
        return None
    if await check_node(state, body, pod, stores=stores):
        return None
    return await record_pod(state, ObjectRef(namespace, name, uid), pod, stores=stores)


async def _not_our_pod(
    state: SessionMemories, body: Mapping[str, Any], pod: Mapping[str, Any], *, stores: StorePaths | None
) -> None:
    """A Pod of this attempt's name that this SessionMemory does not own: our own Pod is gone and another
    took its name (the session is over), an earlier SessionMemory of the same name left it (wait until it
    is gone, force-deleting it on a lost node when allowed), or it is someone else's (``PodNameTaken``)."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    pod_name = str(meta_of(pod).name)
    status: Mapping[str, Any] = body.get("status") or {}
    if status.get("podName") == pod_name and not ph.is_refusal(status) and not ph.is_waiting(status):
        # Our Pod is gone and another took its name: the session is over.
        await record_gone_pod(state, ObjectRef(namespace, name, uid), pod_name, stores=stores)
        return
    if owner_name(pod) == name and owner_uid(pod) is not None:
        lost = await lost_node_of(state, pod)
        if lost is not None:
            await force_delete_if_due(state, body, pod, lost)
        where = f" on {lost.why}" if lost is not None else ""
        await wait_without_pod(
            state,
            body,
            ph.PREVIOUS_POD_TERMINATING,
            f"sandbox Pod {pod_name} of an earlier SessionMemory named {name} still exists{where}; this "
            "session starts once it is gone",
            stores=stores,
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
    attempt = attempt_of(status)
    pod_name = pod_name_for(name, attempt)
    seen = state.last_seen(namespace, name) is not None
    pod = await state.kube.get_pod(namespace, pod_name) if status or seen else None
    if pod is not None:
        written = await adopt_or_refuse(state, body, pod, created=False, stores=stores)
        if written is not None and ph.ready_reason(written) == ph.RESTARTING:
            await reconcile(state, event_body, claims)  # the interrupted Pod has ended: start the next
        return
    if status.get("podName") == pod_name and not ph.is_refusal(status):
        # The session had its Pod and the Pod is gone: it does not get a second one.
        await record_gone_pod(state, ObjectRef(namespace, name, uid), pod_name, stores=stores)
        return
    if status.get("phase") in ph.TERMINAL_PHASES and not ph.is_refusal(status):
        return  # ended without a Pod of this attempt (its start timed out): final
    if attempt and status.get("podName") and not await _interrupted_pod_done(state, body, stores):
        return

    if valid is None:
        refusal: tuple[str, str] | None = (ph.INVALID_SPEC, f"the spec is invalid: {invalid}")
    else:
        refusal = await _refusal(state, body, valid, claims)
    if refusal is not None:
        await refuse(state, namespace, name, *refusal, stores=stores)
        return
    assert valid is not None
    if ph.is_waiting(status) and await timed_out(state, body, None, stores=stores):
        return
    await _create_pod(state, body, valid, stores, attempt)


async def _interrupted_pod_done(state: SessionMemories, body: Mapping[str, Any], stores: StorePaths) -> bool:
    """A restart starts its Pod once the interrupted one has ended (its final flush is over) or is gone;
    meanwhile a Pod on a lost node is force-deleted when allowed, and the start deadline runs."""
    meta = meta_of(body)
    status: Mapping[str, Any] = body.get("status") or {}
    old_name = str(status["podName"])
    old = await state.kube.get_pod(str(meta.namespace), old_name)
    if old is None or (old.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    lost = await lost_node_of(state, old)
    if lost is not None and await force_delete_if_due(state, body, old, lost):
        return False  # gone in a moment: the Pod watcher's DELETED event (or the re-check) goes on
    await timed_out(state, body, None, stores=stores)
    return False


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
    state: SessionMemories,
    body: Mapping[str, Any],
    spec: SessionMemorySpec,
    stores: StorePaths,
    attempt: int,
) -> None:
    """Build the sandbox Pod of ``attempt`` and create it; adopt it when it exists already, wait when a
    quota or a LimitRange refuses it, refuse what else the API refuses."""
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    pod_name = pod_name_for(name, attempt)
    config = state.config
    try:
        manifest = build_sandbox_pod(
            name=name,
            namespace=namespace,
            uid=uid,
            spec=spec,
            agent_image=config.agent_image,
            settings=config.pod_settings,
            attempt=attempt,
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
        if is_quota_refusal(exc):
            refused = f"the API refused sandbox Pod {pod_name}: {refusal_message(exc)}"
            await wait_without_pod(state, body, ph.QUOTA_EXCEEDED, refused, stores=stores)
            return
        message = f"the API refused sandbox Pod {pod_name}: {refusal_message(exc)} (re-checked periodically)"
        await refuse(state, namespace, name, ph.POD_REJECTED, message, stores=stores)
        return
    state.service_account_found(namespace, name)
    state.wait_over(namespace, name)
    await adopt_or_refuse(state, body, created, created=True, stores=stores)
    applied = condition(body.get("status") or {}, ph.SPEC_APPLIED)
    if applied is not None and applied.get("status") != "True":
        text = f"sandbox Pod {pod_name} was built from this spec (generation {generation_of(body)})"
        await record_spec_applied(state, namespace, name, True, text)


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
    watcher's last view. Anything else (a refusal, which needs the spec; a session waiting without its Pod;
    a lost node's Pod still there; an object this process holds no copy of) is reconciled in full."""
    meta = meta_of(event_body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    known = state.known(namespace, name, uid)
    status: Mapping[str, Any] = (known or {}).get("status") or {}
    active = (
        needs_recheck(status)
        and status.get("phase") not in ph.TERMINAL_PHASES
        and not ph.is_waiting(status)
        and status.get("podName") == pod_name_for(name, attempt_of(status))
    )
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
        return
    written = await adopt_or_refuse(state, known, pod, created=False)
    if written is not None and ph.ready_reason(written) == ph.RESTARTING:
        await reconcile(state, event_body, claims)


def sidecar_start_seconds(body: Mapping[str, Any], default: float) -> float:
    """The SessionMemory's ``spec.sync.sidecarStartSeconds``, else the operator's default."""
    sync = (body.get("spec") or {}).get("sync") or {}
    value = sync.get("sidecarStartSeconds") if isinstance(sync, Mapping) else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else default


async def note_spec_change(
    state: SessionMemories, body: Mapping[str, Any], claims: Claims | None = None
) -> None:
    """A spec update: before any Pod it is reconciled; once a Pod exists it cannot reach the Pod, and the
    ``SpecApplied`` condition says whether the running Pod was built from this spec (False, with a Warning
    Event ``SpecChangeNotApplied``, until the spec is changed back or a restart builds a new Pod)."""
    meta = meta_of(body)
    status: Mapping[str, Any] = body.get("status") or {}
    if meta.deletion_timestamp:
        return
    if not status.get("podName") or ph.is_refusal(status):
        await reconcile(state, body, claims)
        return
    namespace, name = str(meta.namespace), str(meta.name)
    state.drop_known(namespace, name)  # the new generation is read, never assumed
    current = await state.read(namespace, name)
    if current is None or meta_of(current).uid != meta.uid:
        return
    status = current.get("status") or {}
    generation = generation_of(current)
    pod_name = str(status.get("podName") or "")
    pod = await state.kube.get_pod(namespace, pod_name) if pod_name else None
    built_from = ((meta_of(pod).raw.get("annotations") or {}) if pod is not None else {}).get(
        ANNOTATION_SPEC_HASH
    )
    try:
        wanted: str | None = spec_hash(validate_spec(current.get("spec") or {}))
    except InvalidSpecError:
        wanted = None
    applied = built_from is not None and built_from == wanted
    if applied:
        text = f"sandbox Pod {pod_name} was built from this spec (generation {generation})"
    else:
        text = (
            f"spec changed (generation {generation}) but sandbox Pod {pod_name} is immutable: the change "
            "applies only to a new SessionMemory (or a restart after an interruption)"
        )
        logger.warning(text, extra={"namespace": namespace, "sessionmemory": name})
        await post_event(state, current, "Warning", "SpecChangeNotApplied", text)
    await record_spec_applied(state, namespace, name, applied, text)


async def record_spec_applied(
    state: SessionMemories, namespace: str, name: str, applied: bool, message: str
) -> None:
    """Write the ``SpecApplied`` condition (and the generation as observed)."""
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        return derive.with_spec_applied(previous, applied, message, generation_of(obj), now)

    await write_status(state, namespace, name, compute)
