"""The SessionMemory controller: kopf handlers, thin and level-based, over pure decisions.

One reconcile serves create, resume (operator restart), spec updates and a periodic re-check. It reads the
world, decides with pure functions, and converges; running it twice changes nothing the second time:

1. A Pod with the deterministic name exists: adopt it if this SessionMemory owns it (controller owner
   reference with its uid), else refuse (``PodNameTaken``). If this SessionMemory had a Pod that is gone,
   the session is over: a session runs once and never gets a second Pod. (A SessionMemory with no status
   yet, whose Pod the watcher has not seen, skips this read: the create in 3 answers 409 for a Pod that
   exists after all.)
2. Before any Pod, refusals, each a ``Failed`` phase whose ``Ready`` condition names the problem:
   an invalid spec (``InvalidSpec``), an older SessionMemory with the same ``sessionId`` in the namespace
   (``DuplicateSession``; ordered by creationTimestamp, then name; kopf keeps an index of sessions from
   its watch, so this check reads nothing from the API), a missing Secret or key
   (``SecretNotFound`` / ``SecretKeyNotFound``), a Secret the API forbids the operator to read
   (``SecretForbidden``): never start a session without its memory. Refusals are re-evaluated periodically
   (and on spec updates), so a session starts once the Secret appears or the older duplicate is gone.
3. Otherwise build the Pod (``pod.build_sandbox_pod``, pure) and create it; a 409 means it exists: read
   and adopt it as in 1. A create the API refuses (any 4xx ``kube.is_refusal`` counts as one: Pod
   Security, ResourceQuota, LimitRange, an invalid field) is the refusal ``PodRejected`` with the API's
   message, re-checked like the others (a quota may free up, a namespace label may change). A transient
   answer (429, 5xx) is retried by kopf; so is the 403 of a ServiceAccount that does not exist (a
   namespace's ``default`` one appears moments after the namespace), but only for the configured
   ``service_account_wait`` since the first such answer: then it is the refusal ``ServiceAccountNotFound``.

The Pod watcher (by label, server-side selector) remembers each Pod event's state and derives the status
from the latest one with ``status.derive_status`` and patches it: once per session however many events
arrived while it waited for a handler slot (``controller/coalescing.py``; the handler itself returns at
once, so kopf does not hold the Pod's body meanwhile). Every status write is a read-modify-write with a
resourceVersion precondition (retried on conflict) under a per-object lock, and posts a Kubernetes Event
when the phase (or the reason of a failure) changes. kopf does not retry event handlers, so a watcher write
that fails (an API hiccup) would be lost: the same periodic re-check therefore also checks every session
that has a Pod and no outcome yet against its Pod (level-based: it repairs a lost write or a missed event;
``recheck`` reads the Pod only, and starts from the SessionMemory as this process last wrote it), and the
watcher remembers each Pod's last state it saw, so a Pod that is gone is judged by what it last reported
(its termination messages), not as lost.

The same path that adopts a Pod (create, resume, the re-check) fails a session whose ``memsync-sync`` has
not started ``spec.sync.sidecarStartSeconds`` (else ``sidecar_start_timeout``) after the mount ended
(``status.sidecar_start_overdue``: ``SidecarNotStarted``, nothing ran so nothing was edited) and deletes its
Pod; the Pod's later end does not replace that verdict.

Spec updates after a Pod exists cannot reach it (a Pod's containers and environment are immutable): the
operator records the new generation as observed and posts a ``SpecChangeNotApplied`` warning; the change
applies only to a new SessionMemory. ``sessionId`` and ``stores`` are immutable in the CRD anyway.

Deletion (memsync's own finalizer): the Pod is deleted with its own grace period so the sidecar's preStop
and SIGTERM flushes run; the handler re-checks until it is gone (bounded by the Pod's grace period plus
``delete_extra_seconds``; past the bound it warns ``FlushNotConfirmed``, records ``DeletionTimedOut`` and
releases), records the Pod's end from the last state the watcher saw (waiting briefly for the watcher's
DELETED event when it has not arrived yet; with no state at all the flush is recorded as not reported), and
releases the object.

While a session runs, a periodic job reads its sidecar's sync health (``/status`` at the Pod IP, see
``controller/health.py``) and writes the ``Synced`` condition, ``lastSyncTime`` and the running totals
(``status.health_status``), only when they changed.

Events (``controller/events.py``: through kopf inside a handler, through the API from the periodic jobs,
which run outside kopf's per-object workers) are posted for the SessionMemory on every phase change and
for PodCreated, PodAdopted (once per operator process), DeletingPod, FlushNotConfirmed,
SpecChangeNotApplied, SyncFailing and SyncRecovered.
Nothing here logs or posts a Secret's data: the Secret is read only to check that the key exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

import kopf

from memsync.controller import events, metrics, waits
from memsync.controller import status as st
from memsync.controller.environment import daemon as environment_daemon
from memsync.controller.health import health_url, read_health
from memsync.controller.kube import (
    KubeAlreadyExists,
    KubeApi,
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    is_missing_service_account,
    is_refusal,
    refusal_message,
)
from memsync.controller.objects import meta_of
from memsync.controller.periodic import (
    HEALTH,
    RECHECK,
    Job,
    Ref,
    Schedule,
    is_running,
    jobs_of,
    needs_recheck,
    run_jobs,
)
from memsync.controller.pod import build_sandbox_pod, pod_name_for
from memsync.controller.remembered import (
    Key,
    Runtime,
    StorePaths,
    identity,
    object_digest,
    paths_of,
    pod_digest,
)
from memsync.controller.settings import EVENT_COMPONENT, ControllerConfig
from memsync.crd.models import (
    API_VERSION,
    GROUP,
    KIND,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    VERSION,
    SessionMemorySpec,
    validate_spec,
)
from memsync.crd.spec_messages import InvalidSpecError

logger = logging.getLogger(__name__)

STATUS_WRITE_ATTEMPTS: Final = 8
RECONCILE_ERROR_DELAY: Final = 10.0

Status = dict[str, Any]
Compute = Callable[[Mapping[str, Any], Status], Status | None]
#: The claims on one session in a namespace (``session_claim`` values), from the operator's index.
Claims = Callable[[str, str], list[Mapping[str, Any]]]
LoginFn = Callable[..., Any]


# --------------------------------------------------------------------------------------------------
# Shared state of one operator process (``remembered.Runtime``; kopf hands it to handlers in ``memo``)
# --------------------------------------------------------------------------------------------------


def build_memo(kube: KubeApi, config: ControllerConfig) -> kopf.Memo:
    memo = kopf.Memo()
    memo["runtime"] = Runtime(kube=kube, config=config)
    return memo


def _runtime(memo: Any) -> Runtime:
    runtime = memo["runtime"]
    assert isinstance(runtime, Runtime)
    return runtime


# --------------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------------


def owner_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the SessionMemory that controls ``pod`` (its controller owner reference), if any."""
    for ref in meta_of(pod).owner_references:
        if (
            ref.get("controller") is True
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).split("/")[0] == GROUP
        ):
            uid = ref.get("uid")
            return str(uid) if uid else None
    return None


def owner_name(pod: Mapping[str, Any]) -> str | None:
    for ref in meta_of(pod).owner_references:
        if ref.get("controller") is True and ref.get("kind") == KIND:
            name = ref.get("name")
            return str(name) if name else None
    return None


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = meta_of(obj)
    return (str(meta.creation_timestamp or ""), str(meta.name or ""))


def senior_duplicate(me: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The SessionMemory that holds ``me``'s sessionId in the namespace, when it is not ``me``.

    All SessionMemories with the same ``spec.sessionId`` (including those being deleted, whose Pods may
    still be flushing) are ordered by creationTimestamp, then name; the first one holds the session.
    """
    session_id = (me.get("spec") or {}).get("sessionId")
    my_uid = meta_of(me).uid
    if not session_id:
        return None
    same = [o for o in others if (o.get("spec") or {}).get("sessionId") == session_id]
    if not any(meta_of(o).uid == my_uid for o in same):
        same.append(me)
    same.sort(key=_sort_key)
    first = same[0]
    return None if meta_of(first).uid == my_uid else first


def session_claim(obj: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]] | None:
    """The SessionMemory's entry in the operator's index of sessions: (namespace, sessionId) -> a claim.

    The claim keeps only what ``senior_duplicate`` orders by (name, uid, creationTimestamp), so the index
    costs a few hundred bytes per object, and the duplicate check reads no listing from the API.
    """
    meta = meta_of(obj)
    session_id = (obj.get("spec") or {}).get("sessionId")
    if not isinstance(session_id, str) or not session_id or not meta.namespace:
        return None
    keep = ("name", "namespace", "uid", "creationTimestamp")
    claim = {"metadata": {k: v for k, v in meta.raw.items() if k in keep}, "spec": {"sessionId": session_id}}
    return {(meta.namespace, session_id): claim}


def _announcement(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(event type, reason, message) when the phase, or the reason of a failure, changed; else None."""
    old_phase, new_phase = old.get("phase"), new.get("phase")
    old_ready = st.condition(old, st.READY) or {}
    new_ready = st.condition(new, st.READY) or {}
    if old_phase == new_phase and (
        new_phase != st.FAILED or old_ready.get("reason") == new_ready.get("reason")
    ):
        return None
    message = str(new.get("message") or "")
    if new_phase == st.FAILED:
        return "Warning", str(new_ready.get("reason") or st.FAILED), message
    if new_phase == st.SUCCEEDED:
        return "Normal", st.SUCCEEDED, message
    return "Normal", str(new_phase), message


# --------------------------------------------------------------------------------------------------
# Status writes
# --------------------------------------------------------------------------------------------------


async def _post_event(
    runtime: Runtime, obj: Mapping[str, Any], type_: str, reason: str, message: str
) -> None:
    ref = {
        "apiVersion": obj.get("apiVersion") or API_VERSION,
        "kind": obj.get("kind") or KIND,
        "metadata": meta_of(obj).reference(),
    }
    await events.post(
        runtime.kube, ref, type_, reason, message, component=EVENT_COMPONENT, now=runtime.clock()
    )


async def write_status(
    runtime: Runtime, namespace: str, name: str, compute: Compute, *, uid: str | None = None
) -> Status | None:
    """Compute the SessionMemory's new status, patch it if it changed; announce phase changes.

    ``compute(obj, previous_status)`` is pure and returns the complete new status (None: leave it). The
    first attempt starts from the object as this process last read or wrote it (``Runtime.known``, when
    it is the one with ``uid``): only this operator writes the status, under this lock, so its status is
    current. The patch carries that object's resourceVersion, so any newer change (a concurrent writer, a
    spec update, kopf's own annotations) makes it fail with a conflict instead of being overwritten; the
    status is then recomputed from a fresh read.
    """
    async with runtime.lock(namespace, name):
        for attempt in range(STATUS_WRITE_ATTEMPTS):
            obj = runtime.known(namespace, name, uid) if attempt == 0 else None
            if obj is None:
                obj = await runtime.read(namespace, name)
            if obj is None:
                return None
            previous: Status = dict(obj.get("status") or {})
            new = compute(obj, previous)
            if new is None or new == previous:
                return previous
            patch = st.status_changes(previous, new)
            rv = meta_of(obj).resource_version
            try:
                written = await runtime.kube.patch_session_memory_status(
                    namespace, name, patch, resource_version=rv
                )
            except (KubeConflict, KubeNotFound):
                runtime.objects.pop((namespace, name), None)
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0) if attempt else 0)
                continue
            runtime.remember(namespace, name, written)
            announcement = _announcement(previous, new)
            if announcement is not None:
                type_, reason, message = announcement
                metrics.PHASE_CHANGES.labels(phase=str(new.get("phase")), reason=reason).inc()
                flushed = st.condition(new, st.FLUSHED) or {}
                if new.get("phase") in st.TERMINAL_PHASES and flushed.get("reason") in (
                    st.FLUSH_INCOMPLETE,
                    st.FLUSH_NOT_REPORTED,
                ):
                    metrics.FLUSH_UNCONFIRMED.labels(reason=str(flushed["reason"])).inc()
                logger.info(
                    "SessionMemory phase changed",
                    extra={
                        "namespace": namespace,
                        "sessionmemory": name,
                        "phase": new.get("phase"),
                        "reason": reason,
                    },
                )
                await _post_event(runtime, obj, type_, reason, message)
            return new
    raise kopf.TemporaryError(f"the status of {namespace}/{name} kept changing while it was written", delay=1)


# --------------------------------------------------------------------------------------------------
# Reconcile (create, resume, update, periodic re-check)
# --------------------------------------------------------------------------------------------------


def _generation(obj: Mapping[str, Any]) -> int | None:
    return meta_of(obj).generation


async def _refuse(
    runtime: Runtime,
    namespace: str,
    name: str,
    reason: str,
    message: str,
    *,
    stores: StorePaths | None = None,
) -> None:
    now = runtime.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if previous.get("podName") and not st.is_refusal(previous):
            return None  # a Pod was started meanwhile: the Pod's story wins
        return st.refusal_status(
            previous,
            reason=reason,
            message=message,
            stores=runtime.store_paths(obj, stores),
            generation=_generation(obj),
            now=now,
        )

    await write_status(runtime, namespace, name, compute)


async def _record_pod(
    runtime: Runtime,
    namespace: str,
    name: str,
    uid: str,
    pod: Mapping[str, Any],
    *,
    pod_gone: bool = False,
    stores: StorePaths | None = None,
) -> Status | None:
    """Derive the status of SessionMemory ``uid`` from ``pod`` (``pod_gone``: its last state) and write it."""
    now = runtime.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != uid:
            return None  # a newer SessionMemory of the same name; this Pod is not its own
        return st.derive_status(
            previous,
            pod,
            stores=runtime.store_paths(obj, stores),
            generation=_generation(obj),
            now=now,
            pod_gone=pod_gone,
        )

    return await write_status(runtime, namespace, name, compute, uid=uid)


async def _record_gone_pod(
    runtime: Runtime, namespace: str, name: str, uid: str, pod_name: str, *, stores: StorePaths | None = None
) -> None:
    """Pod ``pod_name`` is gone: judge it by the last state the watcher saw, else as lost."""
    seen = runtime.seen_pod(namespace, name, uid, pod_name)
    if seen is not None:
        await _record_pod(runtime, namespace, name, uid, seen.pod, pod_gone=True, stores=stores)
    else:
        await _record_lost_pod(runtime, namespace, name, uid, pod_name, stores=stores)


async def _record_lost_pod(
    runtime: Runtime,
    namespace: str,
    name: str,
    uid: str,
    pod_name: str,
    *,
    reason: str = st.POD_LOST,
    why: str | None = None,
    never_ran: bool = False,
    stores: StorePaths | None = None,
) -> None:
    now = runtime.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != uid:
            return None
        return st.lost_pod_status(
            previous,
            pod_name=pod_name,
            stores=runtime.store_paths(obj, stores),
            generation=_generation(obj),
            now=now,
            reason=reason,
            why=why,
            never_ran=never_ran,
        )

    await write_status(runtime, namespace, name, compute, uid=uid)


async def _adopt_or_refuse(
    runtime: Runtime,
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
        if status.get("podName") and not st.is_refusal(status):
            # Our Pod is gone and another took its name: the session is over.
            await _record_gone_pod(runtime, namespace, name, uid, str(status["podName"]), stores=stores)
            return
        await _refuse(
            runtime,
            namespace,
            name,
            st.POD_NAME_TAKEN,
            f"a Pod named {pod_name} already exists in {namespace} and is not owned by this SessionMemory; "
            "delete that Pod or rename the SessionMemory",
            stores=stores,
        )
        return
    pod_uid = str(meta_of(pod).uid or pod_name)
    if pod_uid not in runtime.known_pods:
        runtime.known_pods.add(pod_uid)
        verb = "created" if created else "adopted"
        (metrics.PODS_CREATED if created else metrics.PODS_ADOPTED).inc()
        logger.info(
            f"sandbox Pod {verb}", extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name}
        )
        await _post_event(
            runtime,
            body,
            "Normal",
            "PodCreated" if created else "PodAdopted",
            f"sandbox Pod {pod_name} {verb}",
        )
    timeout = sidecar_start_seconds(body, runtime.config.sidecar_start_timeout)
    stuck = st.sidecar_start_overdue(pod, runtime.clock(), timeout)
    if stuck is None:
        await _record_pod(runtime, namespace, name, uid, pod, stores=stores)
        return
    logger.warning(
        "memsync-sync never started; failing the session and deleting its Pod",
        extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name, "timeout_s": timeout},
    )
    await _record_lost_pod(
        runtime,
        namespace,
        name,
        uid,
        pod_name,
        reason=st.SIDECAR_NOT_STARTED,
        why=stuck,
        never_ran=True,
        stores=stores,
    )
    real_uid = meta_of(pod).uid
    await runtime.kube.delete_pod(namespace, pod_name, uid=str(real_uid) if real_uid else None)


async def reconcile(runtime: Runtime, event_body: Mapping[str, Any], claims: Claims | None = None) -> None:
    """Converge one SessionMemory (see the module docstring). Idempotent.

    The decision is taken on the object as the API serves it now, not on the (possibly older) body of the
    event that triggered it: a status that already names a Pod must never be missed, or a session whose
    Pod vanished could get a second one. ``claims``: the operator's index of sessions (the handlers pass
    it); without it the namespace's SessionMemories are listed.
    """
    meta = meta_of(event_body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    kube = runtime.kube
    body = await runtime.read(namespace, name)
    if body is None or meta_of(body).uid != uid:
        return  # deleted meanwhile (or replaced by a new object of the same name, handled on its own)
    if meta_of(body).deletion_timestamp:
        return  # the delete handler owns the object from here
    status: Mapping[str, Any] = body.get("status") or {}
    pod_name = pod_name_for(name)

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
    pod = (
        await kube.get_pod(namespace, pod_name) if status or (namespace, name) in runtime.seen_pods else None
    )
    if pod is not None:
        await _adopt_or_refuse(runtime, body, pod, created=False, stores=stores)
        return
    if status.get("podName") and not st.is_refusal(status):
        # The session had its Pod and the Pod is gone: it does not get a second one.
        await _record_gone_pod(runtime, namespace, name, uid, str(status["podName"]), stores=stores)
        return

    if valid is None:
        await _refuse(
            runtime, namespace, name, st.INVALID_SPEC, f"the spec is invalid: {invalid}", stores=stores
        )
        return
    spec = valid

    peers = (
        claims(namespace, spec.session_id)
        if claims is not None
        else await kube.list_session_memories(namespace)
    )
    senior = senior_duplicate(body, peers)
    if senior is not None:
        senior_name = meta_of(senior).name
        await _refuse(
            runtime,
            namespace,
            name,
            st.DUPLICATE_SESSION,
            f"SessionMemory {senior_name} already holds session {spec.session_id} in namespace {namespace}: "
            "one SessionMemory per session; this one starts no Pod while that one exists",
            stores=stores,
        )
        return

    ref = spec.work_item_secret_ref
    try:
        keys = await kube.secret_keys(namespace, ref.name)
    except KubeApiError as exc:
        if not is_refusal(exc):
            raise
        await _refuse(
            runtime,
            namespace,
            name,
            st.SECRET_FORBIDDEN,
            f"the API refused to let the operator read Secret {ref.name} (spec.workItemSecretRef.name): "
            f"{refusal_message(exc)}; no Pod was created (re-checked periodically)",
        )
        return
    if keys is None:
        await _refuse(
            runtime,
            namespace,
            name,
            st.SECRET_NOT_FOUND,
            f"Secret {ref.name} (spec.workItemSecretRef.name) does not exist in namespace {namespace}; "
            "the session never starts without its memory, so no Pod was created (re-checked periodically)",
            stores=stores,
        )
        return
    if ref.key not in keys:
        await _refuse(
            runtime,
            namespace,
            name,
            st.SECRET_KEY_NOT_FOUND,
            f"Secret {ref.name} has no key {ref.key} (spec.workItemSecretRef.key); "
            "the session never starts without its memory, so no Pod was created (re-checked periodically)",
            stores=stores,
        )
        return

    try:
        manifest = build_sandbox_pod(
            name=name,
            namespace=namespace,
            uid=uid,
            spec=spec,
            agent_image=runtime.config.agent_image,
            agent_image_pull_policy=runtime.config.agent_image_pull_policy,
            memsync_env_defaults=runtime.config.memsync_env,
            memory_volume_size_limit=runtime.config.memory_volume_size_limit,
        )
    except ValueError as exc:
        await _refuse(runtime, namespace, name, st.INVALID_SPEC, f"the spec is invalid: {exc}", stores=stores)
        return

    try:
        created = await kube.create_pod(namespace, manifest)
    except KubeAlreadyExists:
        existing = await kube.get_pod(namespace, pod_name)
        if existing is None:
            raise kopf.TemporaryError(f"Pod {pod_name} existed and vanished; retrying", delay=1) from None
        await _adopt_or_refuse(runtime, body, existing, created=False, stores=stores)
        return
    except KubeApiError as exc:
        if is_missing_service_account(exc):
            await _wait_for_service_account(
                runtime, namespace=namespace, name=name, raw_spec=raw_spec, exc=exc, stores=stores
            )
            return
        if not is_refusal(exc):
            raise
        await _refuse(
            runtime,
            namespace,
            name,
            st.POD_REJECTED,
            f"the API refused sandbox Pod {pod_name}: {refusal_message(exc)} (re-checked periodically)",
            stores=stores,
        )
        return
    runtime.service_account_missing_since.pop((namespace, name), None)
    await _adopt_or_refuse(runtime, body, created, created=True, stores=stores)


async def _wait_for_service_account(
    runtime: Runtime,
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
    first = runtime.service_account_missing_since.setdefault((namespace, name), now)
    wait = runtime.config.service_account_wait
    if not waits.wait_is_over(first, now, wait):
        raise exc
    message = waits.missing_service_account_message(waits.service_account_of(raw_spec), namespace, wait)
    await _refuse(
        runtime,
        namespace,
        name,
        st.SERVICE_ACCOUNT_NOT_FOUND,
        f"{message}: {refusal_message(exc)}",
        stores=stores,
    )


async def recheck(runtime: Runtime, event_body: Mapping[str, Any], claims: Claims | None = None) -> None:
    """The periodic re-check. A session with its Pod and no outcome yet is checked against its Pod alone,
    from the SessionMemory as this process last read or wrote it (only this operator writes the status, so
    that copy's status is current; a write it makes still carries that copy's resourceVersion): the Pod is
    read, and a gone Pod is recorded from the watcher's last view. Anything else (a refusal, which needs the
    spec; an object this process holds no copy of) is reconciled in full."""
    meta = meta_of(event_body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    known = runtime.known(namespace, name, uid)
    status: Mapping[str, Any] = (known or {}).get("status") or {}
    active = needs_recheck(status) and not st.is_refusal(status)
    if known is None or not active or meta_of(known).deletion_timestamp:
        await reconcile(runtime, event_body, claims)
        return
    pod_name = str(status["podName"])
    pod = await runtime.kube.get_pod(namespace, pod_name)
    if pod is None:
        await _record_gone_pod(runtime, namespace, name, uid, pod_name)
    else:
        await _adopt_or_refuse(runtime, known, pod, created=False)


def sidecar_start_seconds(body: Mapping[str, Any], default: float) -> float:
    """The SessionMemory's ``spec.sync.sidecarStartSeconds``, else the operator's default."""
    sync = (body.get("spec") or {}).get("sync") or {}
    value = sync.get("sidecarStartSeconds") if isinstance(sync, Mapping) else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else default


async def _guarded(runtime: Runtime, body: Mapping[str, Any], step: Callable[[], Awaitable[None]]) -> None:
    """Run a handler step (in one of the ``remembered.HANDLER_SLOTS``); API errors become kopf retries
    with a delay (never a tight loop)."""
    try:
        async with runtime.slots:
            await step()
    except KubeApiError as exc:
        metrics.API_ERRORS.labels(status=str(exc.status)).inc()
        meta = meta_of(body)
        logger.warning(
            "Kubernetes API call failed; will retry",
            extra={"namespace": meta.namespace, "sessionmemory": meta.name, "error": str(exc)},
        )
        raise kopf.TemporaryError(str(exc), delay=RECONCILE_ERROR_DELAY) from None


# --------------------------------------------------------------------------------------------------
# Deletion
# --------------------------------------------------------------------------------------------------


def _grace_seconds(pod: Mapping[str, Any], default: float) -> float:
    meta_grace = meta_of(pod).deletion_grace_period_seconds
    spec_grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    for value in (meta_grace, spec_grace):
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return default


async def finalize(runtime: Runtime, body: Mapping[str, Any], elapsed: float) -> None:
    """Delete the Pod gracefully, wait (bounded) until it is gone, make the outcome final; then release.

    Raises kopf.TemporaryError to be called again while the Pod is still flushing.
    """
    meta = meta_of(body)
    namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
    config = runtime.config
    kube = runtime.kube
    current = await runtime.read(namespace, name)
    if current is None or meta_of(current).uid != uid:
        runtime.forget(namespace, name)
        return
    status: Mapping[str, Any] = current.get("status") or {}
    pod_name = str(status.get("podName") or pod_name_for(name))

    pod = await kube.get_pod(namespace, pod_name)
    if pod is not None and owner_uid(pod) == uid:
        bound = config.delete_timeout_seconds
        if bound is None:
            bound = _grace_seconds(pod, config.default_grace_seconds) + config.delete_extra_seconds
        if elapsed <= bound:
            if not meta_of(pod).deletion_timestamp:
                pod_uid = meta_of(pod).uid
                await kube.delete_pod(namespace, pod_name, uid=str(pod_uid) if pod_uid else None)
                logger.info(
                    "deleting the sandbox Pod; its sidecar flushes the stores",
                    extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name},
                )
                await _post_event(
                    runtime,
                    body,
                    "Normal",
                    "DeletingPod",
                    f"deleting sandbox Pod {pod_name} with its grace period; memsync-sync flushes the stores",
                )
            await _record_pod(runtime, namespace, name, uid, pod)
            raise kopf.TemporaryError(
                f"waiting for sandbox Pod {pod_name} to end", delay=config.delete_recheck_delay
            )
        message = (
            f"sandbox Pod {pod_name} did not end within {bound:.0f}s; releasing the SessionMemory without "
            "a confirmed final flush (the Pod is left to Kubernetes' garbage collector)"
        )
        logger.warning(message, extra={"namespace": namespace, "sessionmemory": name, "pod": pod_name})
        await _post_event(runtime, body, "Warning", "FlushNotConfirmed", message)
        await _record_lost_pod(
            runtime,
            namespace,
            name,
            uid,
            pod_name,
            reason=st.DELETION_TIMED_OUT,
            why=f"the deletion gave up waiting for sandbox Pod {pod_name} after {bound:.0f}s",
        )
        runtime.forget(namespace, name)
        return

    had_pod = bool(status.get("podName")) and not st.is_refusal(status)
    if had_pod:
        if status.get("phase") not in st.TERMINAL_PHASES:
            # The Pod is gone but its outcome is not recorded yet (the watcher's write may have failed,
            # or its DELETED event is still on the way: then give it a moment).
            seen = runtime.seen_pod(namespace, name, uid, pod_name)
            if seen is None or not seen.gone:
                gone_since = runtime.gone_since.setdefault((namespace, name), time.monotonic())
                if time.monotonic() - gone_since < config.report_settle_seconds:
                    raise kopf.TemporaryError(
                        f"sandbox Pod {pod_name} is gone; waiting for its final report",
                        delay=min(1.0, config.delete_recheck_delay),
                    )
            await _record_gone_pod(runtime, namespace, name, uid, pod_name)
        final = (await kube.get_session_memory(namespace, name) or {}).get("status") or {}
        flushed = st.condition(final, st.FLUSHED) or {}
        if flushed.get("status") != "True":
            await _post_event(
                runtime,
                body,
                "Warning",
                "FlushNotConfirmed",
                f"released without a confirmed final flush: {flushed.get('message') or 'no report'}",
            )
    logger.info("SessionMemory released", extra={"namespace": namespace, "sessionmemory": name})
    runtime.forget(namespace, name)


# --------------------------------------------------------------------------------------------------
# Pod watcher
# --------------------------------------------------------------------------------------------------


def see_pod_event(runtime: Runtime, event_type: str | None, pod: Mapping[str, Any]) -> Key | None:
    """Remember one Pod event's state for its owner (ADDED/MODIFIED/DELETED or the initial listing); the
    owner's (namespace, name), or None for a Pod no SessionMemory controls.

    Remembered before any write: if the write fails, the re-check and the delete handler still know."""
    uid = owner_uid(pod)
    name = owner_name(pod)
    namespace = meta_of(pod).namespace
    if uid is None or name is None or not namespace:
        return None
    runtime.see_pod(str(namespace), name, uid, pod, gone=event_type == "DELETED")
    return str(namespace), name


async def record_seen_pod(runtime: Runtime, key: Key) -> None:
    """Derive SessionMemory ``key``'s status from the last Pod state the watcher saw, and write it."""
    seen = runtime.seen_pods.get(key)
    if seen is None:
        return
    written = await _record_pod(runtime, key[0], key[1], seen.owner_uid, seen.pod, pod_gone=seen.gone)
    if written is None and runtime.seen_pods.get(key) is seen:
        runtime.seen_pods.pop(key, None)  # the SessionMemory is gone: nothing to remember it for


async def record_pod_later(runtime: Runtime, key: Key) -> None:
    """``record_seen_pod`` in a handler slot, run by ``Runtime.pod_updates`` for the Pod watcher. kopf does
    not retry event handlers: a write that fails is logged, and the next event of the Pod (or the periodic
    re-check) derives the status again."""
    try:
        async with runtime.slots:
            await record_seen_pod(runtime, key)
    except (KubeApiError, kopf.TemporaryError) as exc:
        logger.warning(
            "could not record a Pod event",
            extra={"namespace": key[0], "sessionmemory": key[1], "error": str(exc)},
        )


async def note_spec_change(runtime: Runtime, body: Mapping[str, Any], claims: Claims | None = None) -> None:
    """A spec update: before any Pod it is reconciled; once a Pod exists it cannot reach the Pod."""
    meta = meta_of(body)
    status: Mapping[str, Any] = body.get("status") or {}
    if meta.deletion_timestamp:
        return
    if not status.get("podName") or st.is_refusal(status):
        await reconcile(runtime, body, claims)
        return
    namespace, name = str(meta.namespace), str(meta.name)
    generation = _generation(body)
    pod_name = str(status["podName"])
    message = (
        f"spec changed (generation {generation}) but sandbox Pod {pod_name} is immutable: the change applies "
        "only to a new SessionMemory"
    )
    logger.warning(message, extra={"namespace": namespace, "sessionmemory": name})
    await _post_event(runtime, body, "Warning", "SpecChangeNotApplied", message)

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        return st.with_generation(previous, _generation(obj))

    runtime.objects.pop((namespace, name), None)  # the new generation is read, never assumed
    await write_status(runtime, namespace, name, compute)


# --------------------------------------------------------------------------------------------------
# Live sync health (the sidecar's /status, polled while the session runs)
# --------------------------------------------------------------------------------------------------


def reference(ref: Ref) -> dict[str, Any]:
    """A SessionMemory's identity as a body (what a step that reads the object afresh needs)."""
    namespace, name, uid = ref
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
    }


async def poll_health_of(runtime: Runtime, ref: Ref) -> None:
    """The health poll of SessionMemory ``ref``, from the object as this process last read or wrote it."""
    namespace, name, uid = ref
    obj = runtime.known(namespace, name, uid) or await runtime.read(namespace, name)
    if obj is not None and meta_of(obj).uid == uid and is_running(obj.get("status") or {}):
        await poll_health(runtime, obj)


async def poll_health(runtime: Runtime, body: Mapping[str, Any]) -> None:
    """Read the running session's sync health from its sidecar and write it (only what changed).

    A Warning ``SyncFailing`` Event is posted when ``Synced`` turns False, a Normal ``SyncRecovered`` when
    it turns True again.
    """
    meta = body.get("metadata") or {}
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid"))
    status: Mapping[str, Any] = body.get("status") or {}
    pod_name = str(status.get("podName") or "")
    seen = runtime.seen_pod(namespace, name, uid, pod_name)
    pod = seen.pod if seen is not None and not seen.gone else await runtime.kube.get_pod(namespace, pod_name)
    if pod is None or owner_uid(pod) != uid:
        return
    url = (runtime.config.health_address or health_url)(pod)
    if url is None:
        return
    health, error = await read_health(url)
    now = runtime.clock()
    if st.health_status(status, health, error=error, generation=_generation(body), now=now) == status:
        return  # nothing changed since the status this poll was given: no read, no write
    before: dict[str, Any] = {}

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        before.clear()
        before.update(st.condition(previous, st.SYNCED) or {})
        return st.health_status(previous, health, error=error, generation=_generation(obj), now=now)

    new = await write_status(runtime, namespace, name, compute, uid=uid)
    after = st.condition(new or {}, st.SYNCED) or {}
    if after.get("status") != before.get("status") and after.get("status") in ("True", "False"):
        failing = after["status"] == "False"
        if failing or before.get("status") == "False":
            await _post_event(
                runtime,
                body,
                "Warning" if failing else "Normal",
                "SyncFailing" if failing else "SyncRecovered",
                str(after.get("message") or ""),
            )


# --------------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------------


SESSIONS_INDEX: Final = "sessions"
PERIODIC_INDEX: Final = "periodic"


SessionIndex = kopf.Index[tuple[str, str], Mapping[str, Any]]


def claims_of(index: SessionIndex) -> Claims:
    """The claims on (namespace, sessionId) that kopf's index of sessions holds."""

    def claims(namespace: str, session_id: str) -> list[Mapping[str, Any]]:
        return list(index.get((namespace, session_id), ()))

    return claims


def build_registry(config: ControllerConfig, *, login: LoginFn | None = None) -> kopf.OperatorRegistry:
    """A fresh kopf registry with memsync's handlers (one per operator run; tests make their own).

    ``login``: kopf's authentication handler; the CLI passes ``KubeApi.connection_info`` so kopf and the
    controller's own calls share one set of credentials. Without it, kopf's ``login_via_client`` (the
    official client's in-cluster or kubeconfig configuration, which ``KubeApi.from_environment`` reads too).
    """
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry, id="login")(login or kopf.login_via_client)

    async def index_session(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]] | None:
        return session_claim(body)

    # kopf keeps this index from its own watch of SessionMemories; handlers receive it as ``sessions``.
    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id=SESSIONS_INDEX)(index_session)

    # Each handler keeps only what its step reads of kopf's body (kopf starts a handler for every new
    # object at once, and they wait for a slot): the reconcile reads the object afresh and needs only its
    # identity; the others its identity, generation and status; the Pod watcher the Pod's digest.
    async def on_create_or_resume(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
        runtime, obj = _runtime(memo), identity(body)
        runtime.indexed.set()  # kopf runs handlers once every SessionMemory is indexed
        await _guarded(runtime, obj, lambda: reconcile(runtime, obj, claims_of(kwargs[SESSIONS_INDEX])))

    kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")(on_create_or_resume)
    kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")(on_create_or_resume)

    async def on_update(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
        runtime, obj = _runtime(memo), object_digest(body)
        runtime.indexed.set()  # kopf runs handlers once every SessionMemory is indexed
        await _guarded(
            runtime, obj, lambda: note_spec_change(runtime, obj, claims_of(kwargs[SESSIONS_INDEX]))
        )

    kopf.on.update(GROUP, VERSION, PLURAL, field="spec", registry=registry, id="spec-change")(on_update)

    async def index_jobs(body: kopf.Body, **_: Any) -> dict[str, Ref] | None:
        return jobs_of(body)

    # The periodic re-check and health poll run in one loop over this index (``controller/periodic.py``),
    # not as a kopf timer per SessionMemory (each would keep the object's full body and a task).
    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id=PERIODIC_INDEX)(index_jobs)

    async def start_periodic(memo: kopf.Memo, **kwargs: Any) -> None:
        runtime = _runtime(memo)
        claims = claims_of(kwargs[SESSIONS_INDEX])

        async def recheck_one(ref: Ref) -> None:
            ident = reference(ref)
            await _guarded(runtime, ident, lambda: recheck(runtime, ident, claims))

        async def health_one(ref: Ref) -> None:
            ident = reference(ref)
            await _guarded(runtime, ident, lambda: poll_health_of(runtime, ref))

        jobs = [
            Job(RECHECK, Schedule(config.recheck_interval, config.recheck_interval), recheck_one),
            Job(HEALTH, Schedule(config.health_interval, 0.0), health_one),
        ]
        runtime.periodic = asyncio.create_task(
            run_jobs(jobs, kwargs[PERIODIC_INDEX], runtime.indexed, error_delay=RECONCILE_ERROR_DELAY)
        )

    kopf.on.startup(registry=registry, id="periodic")(start_periodic)

    async def stop_periodic(memo: kopf.Memo, **_: Any) -> None:
        runtime = _runtime(memo)
        if runtime.periodic is not None:
            runtime.periodic.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runtime.periodic
        await runtime.pod_updates.close()

    kopf.on.cleanup(registry=registry, id="periodic")(stop_periodic)

    async def on_delete(body: kopf.Body, memo: kopf.Memo, runtime: dt.timedelta, **_: Any) -> None:
        rt, obj = _runtime(memo), object_digest(body)
        rt.indexed.set()  # kopf runs handlers once every SessionMemory is indexed
        await _guarded(rt, obj, lambda: finalize(rt, obj, runtime.total_seconds()))

    kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, id="cleanup")(on_delete)

    # The Pod watcher remembers the Pod's digest and returns at once (kopf then drops the Pod's body); the
    # status is derived later, once per session however many events arrived meanwhile (``coalescing.py``).
    async def on_pod(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        runtime = _runtime(memo)
        runtime.indexed.set()  # kopf runs handlers once every SessionMemory is indexed
        key = see_pod_event(runtime, type, pod_digest(body))
        if key is not None:
            runtime.pod_updates.ask(key, functools.partial(record_pod_later, runtime))

    kopf.on.event("v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY}, registry=registry, id="pod-status")(
        on_pod
    )
    if config.environments:
        environment_daemon.register(registry)
    return registry
