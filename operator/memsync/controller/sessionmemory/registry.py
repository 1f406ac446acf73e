"""kopf wiring of the SessionMemory controller: indexes, handlers, the periodic loop (see the package's
docstring for what each step does)."""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import kopf

from memsync.controller import metrics
from memsync.controller.environment import daemon as environment_daemon
from memsync.controller.forbidden import tolerate_forbidden_watches
from memsync.controller.kube import KubeApi, KubeApiError
from memsync.controller.leadership.fence import Fence
from memsync.controller.liveness import Liveness
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.periodic import HEALTH, RECHECK, Job, Schedule, jobs_of, run_jobs
from memsync.controller.sessionmemory.digest import object_digest, pod_digest
from memsync.controller.sessionmemory.finalize import finalize
from memsync.controller.sessionmemory.health import HealthWatches
from memsync.controller.sessionmemory.ownership import Claims, session_claim
from memsync.controller.sessionmemory.phases import holds_finalizer
from memsync.controller.sessionmemory.podwatch import derive_later, see_pod_event
from memsync.controller.sessionmemory.reconcile import note_spec_change, recheck, reconcile
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.settings import ControllerConfig
from memsync.crd.models import API_VERSION, GROUP, KIND, LABEL_MANAGED_BY, MANAGED_BY, PLURAL, VERSION

logger = logging.getLogger(__name__)

RECONCILE_ERROR_DELAY: Final = 10.0
#: Where the operator's state is in kopf's ``memo``: the SessionMemories' state, and the API client
#: (which the AgentEnvironment daemon uses too).
STATE_KEY: Final = "sessionmemories"
KUBE_KEY: Final = "kube"
LIVENESS_KEY: Final = "liveness"
FENCE_KEY: Final = "fence"
LoginFn = Callable[..., Any]


def build_memo(
    kube: KubeApi, config: ControllerConfig, liveness: Liveness | None = None, fence: Fence | None = None
) -> kopf.Memo:
    """What every handler shares: the API client, the SessionMemories' state, the liveness probe's signals,
    and the leadership fence (the environments' work queues ask it before every call)."""
    memo = kopf.Memo()
    memo[KUBE_KEY] = kube
    memo[STATE_KEY] = SessionMemories(kube=kube, config=config)
    memo[LIVENESS_KEY] = liveness or Liveness()
    memo[FENCE_KEY] = fence
    return memo


def liveness_of(memo: Any) -> Liveness:
    liveness = memo[LIVENESS_KEY]
    assert isinstance(liveness, Liveness)
    return liveness


def state_of(memo: Any) -> SessionMemories:
    state = memo[STATE_KEY]
    assert isinstance(state, SessionMemories)
    return state


async def guarded(
    state: SessionMemories, body: Mapping[str, Any], step: Callable[[], Awaitable[None]]
) -> None:
    """Run a handler step (in one of the ``state.HANDLER_SLOTS``); API errors become kopf retries
    with a delay (never a tight loop)."""
    try:
        async with state.slots:
            await step()
        metrics.LAST_RECONCILE.set_to_current_time()
    except KubeApiError as exc:
        metrics.API_ERRORS.labels(status=str(exc.status)).inc()
        meta = meta_of(body)
        logger.warning(
            "Kubernetes API call failed; will retry",
            extra={"namespace": meta.namespace, "sessionmemory": meta.name, "error": str(exc)},
        )
        raise kopf.TemporaryError(str(exc), delay=RECONCILE_ERROR_DELAY) from None


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
    tolerate_forbidden_watches()  # a namespace the operator may no longer watch never stops it
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry, id="login")(login or kopf.login_via_client)
    _register_sessions(registry)
    _register_periodic(registry, config)
    _register_pods(registry)
    if config.environments:
        environment_daemon.register(registry, start_deadline=config.start_deadline)
    return registry


def _register_sessions(registry: kopf.OperatorRegistry) -> None:
    """The index of sessions and the SessionMemory handlers: reconcile, spec change, deletion."""

    async def index_session(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]] | None:
        return session_claim(body)

    # kopf keeps this index from its own watch of SessionMemories; handlers receive it as ``sessions``.
    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id=SESSIONS_INDEX)(index_session)

    # Each handler keeps only what its step reads of kopf's body (kopf starts a handler for every new
    # object at once, and they wait for a slot): the reconcile reads the object afresh and needs only its
    # ObjectRef; the others its ObjectRef, generation and status (``digest.object_digest``).
    async def on_create_or_resume(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
        state, obj = state_of(memo), ObjectRef.of(body).as_body(API_VERSION, KIND)
        state.handler_started()
        await guarded(state, obj, lambda: reconcile(state, obj, claims_of(kwargs[SESSIONS_INDEX])))

    kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")(on_create_or_resume)
    kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")(on_create_or_resume)

    async def on_update(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
        state, obj = state_of(memo), object_digest(body)
        state.handler_started()
        await guarded(state, obj, lambda: note_spec_change(state, obj, claims_of(kwargs[SESSIONS_INDEX])))

    kopf.on.update(GROUP, VERSION, PLURAL, field="spec", registry=registry, id="spec-change")(on_update)

    async def on_delete(body: kopf.Body, memo: kopf.Memo, runtime: dt.timedelta, **_: Any) -> None:
        # ``runtime`` is kopf's: how long this handler has been retried.
        state, obj = state_of(memo), object_digest(body)
        state.handler_started()
        await guarded(state, obj, lambda: finalize(state, obj, runtime.total_seconds()))

    # The finalizer (and so this handler) is kept only until the session's outcome is recorded: kopf removes
    # it from a SessionMemory whose status is final, so a finished object never waits on the operator.
    def keeps_finalizer(status: Mapping[str, Any], **_: Any) -> bool:
        return holds_finalizer(status or {})

    kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, id="cleanup", when=keeps_finalizer)(on_delete)


def _register_periodic(registry: kopf.OperatorRegistry, config: ControllerConfig) -> None:
    """The periodic re-check and health poll: one loop over an index (``controller/periodic.py``), not a
    kopf timer per SessionMemory (each would keep the object's full body and a task)."""

    async def index_jobs(body: kopf.Body, **_: Any) -> dict[str, ObjectRef] | None:
        return jobs_of(body)

    kopf.index(GROUP, VERSION, PLURAL, registry=registry, id=PERIODIC_INDEX)(index_jobs)

    async def start_periodic(memo: kopf.Memo, **kwargs: Any) -> None:
        state = state_of(memo)
        claims = claims_of(kwargs[SESSIONS_INDEX])

        async def recheck_one(ref: ObjectRef) -> None:
            ident = ref.as_body(API_VERSION, KIND)
            await guarded(state, ident, lambda: recheck(state, ident, claims))

        watches = HealthWatches(state, connections=config.health_connections)
        jobs = [Job(RECHECK, Schedule(config.recheck_interval, config.recheck_interval), recheck_one)]
        liveness = liveness_of(memo)
        state.start_periodic(
            run_jobs(
                jobs,
                kwargs[PERIODIC_INDEX],
                state.indexed,
                error_delay=RECONCILE_ERROR_DELAY,
                followers={HEALTH: watches.sync},
                on_round=liveness.round_done,
            ),
            watches.close,
        )
        liveness.periodic_ended = state.periodic_ended

    kopf.on.startup(registry=registry, id="periodic")(start_periodic)

    async def stop_periodic(memo: kopf.Memo, **_: Any) -> None:
        await state_of(memo).stop()

    kopf.on.cleanup(registry=registry, id="periodic")(stop_periodic)


def _register_pods(registry: kopf.OperatorRegistry) -> None:
    """The Pod watcher (by label, a server-side selector): it remembers the Pod's digest and returns at once
    (kopf then drops the Pod's body); the status is derived later, once per session however many events
    arrived meanwhile (``podwatch.py``)."""

    async def on_pod(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        state = state_of(memo)
        state.handler_started()
        ref = see_pod_event(state, type, pod_digest(body))
        if ref is not None:
            state.pod_updates.ask(ref, functools.partial(derive_later, state))

    kopf.on.event("v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY}, registry=registry, id="pod-status")(
        on_pod
    )
