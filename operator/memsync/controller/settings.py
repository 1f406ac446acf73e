"""The controller's configuration and the kopf settings that users of kopf operators learned to need.

- Watch timeouts: the API server closes every watch after ``server_timeout`` and the client gives up after
  ``client_timeout``, so a connection silently dropped by a load balancer is noticed and re-established
  (kopf's most common complaint: "the operator stops seeing changes"); kopf >= 1.44 on Python >= 3.11 also
  uses bookmarks with ``inactivity_timeout``.
- memsync's own finalizer (``agents.memsync.dev/finalizer``) and annotation prefix (``agents.memsync.dev``)
  for kopf's progress and diff-base records, so they are recognisably ours and never collide with another
  kopf operator's; progress lives in annotations only (nothing under ``status.kopf``).
- Pods are watched with a server-side label selector: the operator never lists every Pod of the cluster.
- Events: Normal and Warning events are posted (``posting.level`` INFO); kopf's own log lines are not
  (``posting.loggers`` stays off).
- kopf's own requests (finalizers, its progress annotations, Events) go through a connection pool of
  ``KOPF_REQUESTS`` connections plus one per watch (``bounded_session``): kopf's built-in one is unlimited,
  and a burst of 1,000 new SessionMemories then sent hundreds of patches at once, which the API server's
  priority and fairness answered with 429 (kopf retries them, seconds later).
- No ``queueing.worker_limit``: kopf's object workers wait until every object of an indexed resource is
  indexed; with a bounded pool, a burst of 1,000 new SessionMemories stalled the operator for good.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
import kopf

from memsync.controller.sessionmemory.pod import (
    DEFAULT_EPHEMERAL_STORAGE_LIMIT,
    DEFAULT_MEMORY_VOLUME_SIZE_LIMIT,
    PodSettings,
)
from memsync.crd.env_spec import EnvVarSpec
from memsync.crd.models import ANNOTATION_PREFIX, FINALIZER, LABEL_MANAGED_BY, MANAGED_BY

#: The label selector of the Pods the operator watches (every sandbox Pod carries it).
POD_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
DEFAULT_AGENT_IMAGE: Final = "ghcr.io/memsync/memsync:latest"
EVENT_COMPONENT: Final = "memsync-operator"
KOPF_REQUESTS: Final = 32
#: Seconds from a SessionMemory's creation to its sandbox running, unless its spec says otherwise: room for
#: a cluster autoscaler to add a node, an image pull and the mount.
DEFAULT_START_DEADLINE: Final = 600.0
#: How long kopf keeps an object's worker after its last event (kopf's default: 5 s). A waiting worker keeps
#: the object's last body; in a burst of 1,000 new sessions, half a second kept the operator's peak RSS
#: lower (bench/operator_scale.py), and a worker costs little to start again.
WORKER_IDLE_SECONDS: Final = 0.5


@dataclass(frozen=True)
class ControllerConfig:
    """What the handlers need besides the Kubernetes API.

    - ``recheck_interval``: how often a SessionMemory refused before any Pod existed (missing Secret or
      key, duplicate session, invalid spec) is evaluated again, so it starts once the cause is fixed; and
      how often a session with a Pod and no outcome yet is reconciled against its Pod (a status write of
      the Pod watcher that failed is repaired by then).
    - ``pod_reread_interval``: the re-check of an active session starts from the Pod as the watcher saw it
      within this many seconds, and reads the Pod from the API otherwise (a missed watch event is repaired
      within it); a running fleet of 5,000 sessions then reads a few Pods a second, not 166.
    - ``delete_recheck_delay``: while deleting, how often the operator checks whether the Pod is gone.
    - ``delete_extra_seconds``: the deletion waits for the Pod at most its ``terminationGracePeriodSeconds``
      plus this, then gives up waiting, warns, and releases the SessionMemory (``delete_timeout_seconds``,
      when set, replaces that bound with a fixed one).
    - ``report_settle_seconds``: once the Pod is gone, how long the deletion waits for the Pod watcher to
      record the Pod's last termination messages before recording the final flush as not reported.
    - ``health_interval``: how often the sync sidecar's ``/status`` of a running session is read when it
      cannot be watched (a sidecar of an older version, or one that could not be reached); a watched one
      reports a change at once (``sessionmemory/health.py``).
    - ``health_connections``: at most this many sidecars are watched over open connections at once (0: no
      bound); beyond it, watches wait for a free connection and their changes arrive later.
    - ``health_address``: the URL of a Pod's ``/status`` (default: the Pod IP and the sidecar's metrics
      port); a test that runs Pods on one machine with remapped ports passes its own.
    - ``service_account_wait``: how long a Pod create refused because its ServiceAccount does not exist is
      retried (a namespace's ``default`` one appears moments after the namespace) before the session is
      refused with ``ServiceAccountNotFound``.
    - ``sidecar_start_timeout``: how long after the mount ended memsync-sync may take to start (its
      startupProbe to pass) before the session fails with ``SidecarNotStarted`` and its Pod is deleted
      (checked by the periodic re-check; ``spec.sync.sidecarStartSeconds`` replaces it per session).
    - ``memory_volume_size_limit``: the stores' folder's emptyDir ``sizeLimit`` and memsync-sync's
      ephemeral-storage request, unless ``spec.sync.memoryVolumeSizeLimit`` sets them.
    - ``memsync_env``: extra environment for the memsync containers of every Pod (a proxy, a CA bundle);
      a SessionMemory's ``spec.template.spec.memsync.env`` entries of the same name replace these.
    - ``ephemeral_storage_request`` / ``ephemeral_storage_limit``: the memsync containers' ephemeral storage
      (the request defaults to the stores' folder size; the limit is never below the request), unless
      ``spec.template.spec.memsync.resources`` sets it.
    - ``start_deadline``: seconds from a SessionMemory's creation (or restart) to its sandbox running,
      unless ``spec.startDeadlineSeconds`` sets it; past it the session fails with ``StartTimeout``.
    - ``node_lost_grace``: how long a Pod's node may be NotReady or Unknown before the session is
      ``NodeLost`` (a node that is gone or tainted out-of-service is lost at once).
    - ``force_delete_lost_pods``: force-delete a lost node's Pod once it had its grace period after that
      (off: the Pod stays Terminating until the node comes back or is deleted).
    """

    agent_image: str = DEFAULT_AGENT_IMAGE
    agent_image_pull_policy: str = "IfNotPresent"
    recheck_interval: float = 30.0
    pod_reread_interval: float = 600.0
    delete_recheck_delay: float = 5.0
    delete_extra_seconds: float = 60.0
    delete_timeout_seconds: float | None = None
    report_settle_seconds: float = 10.0
    default_grace_seconds: float = 120.0
    health_interval: float = 5.0
    health_connections: int = 0
    service_account_wait: float = 60.0
    sidecar_start_timeout: float = 300.0
    memory_volume_size_limit: str = DEFAULT_MEMORY_VOLUME_SIZE_LIMIT
    health_address: Callable[[Mapping[str, Any]], str | None] | None = None
    memsync_env: tuple[EnvVarSpec, ...] = field(default_factory=tuple)
    ephemeral_storage_request: str | None = None
    ephemeral_storage_limit: str = DEFAULT_EPHEMERAL_STORAGE_LIMIT
    start_deadline: float = DEFAULT_START_DEADLINE
    node_lost_grace: float = 60.0
    force_delete_lost_pods: bool = False

    @property
    def pod_settings(self) -> PodSettings:
        """What every sandbox Pod gets of this configuration."""
        return PodSettings(
            agent_image_pull_policy=self.agent_image_pull_policy,
            memsync_env_defaults=self.memsync_env,
            memory_volume_size_limit=self.memory_volume_size_limit,
            ephemeral_storage_request=self.ephemeral_storage_request,
            ephemeral_storage_limit=self.ephemeral_storage_limit,
        )

    # Serve AgentEnvironments too (one poll loop each); off unless asked for.
    environments: bool = False


@dataclass(frozen=True)
class WatchTimeouts:
    # Sent as the watch's timeoutSeconds, an integer: the API server answers "300.0" with 400 BadRequest.
    server_timeout: int = 300
    client_timeout: float = 330.0
    connect_timeout: float = 30.0
    inactivity_timeout: float = 70.0
    reconnect_backoff: float = 1.0


def configure_settings(
    settings: kopf.OperatorSettings,
    *,
    timeouts: WatchTimeouts | None = None,
    namespace_patterns: bool = False,
    reporting_instance: str | None = None,
) -> kopf.OperatorSettings:
    """Apply memsync's kopf settings to ``settings`` (in place) and return it.

    kopf's scanning (a watch of CRDs, to notice a CRD installed after the operator started, and of
    Namespaces, to match namespace patterns) is off: cluster-wide or with exact namespaces, kopf finds the
    SessionMemory resource by API discovery at start and needs no read access to CRDs or Namespaces
    (the CRD must be established before the operator starts, as the install instructions require).
    ``namespace_patterns``: the operator serves namespace globs (``agents-*``); kopf then lists and watches
    Namespaces to match them, which needs ``list`` and ``watch`` on Namespaces (and on CRDs, else it warns).
    """
    t = timeouts or WatchTimeouts()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.watching.server_timeout = t.server_timeout
    settings.watching.client_timeout = t.client_timeout
    settings.watching.connect_timeout = t.connect_timeout
    settings.watching.inactivity_timeout = t.inactivity_timeout
    settings.watching.reconnect_backoff = t.reconnect_backoff
    settings.watching.label_selectors["v1", "pods"] = POD_SELECTOR
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    settings.posting.enabled = True
    settings.posting.level = logging.INFO
    settings.posting.reporting_component = EVENT_COMPONENT
    if reporting_instance:
        settings.posting.reporting_instance = reporting_instance
    settings.scanning.disabled = not namespace_patterns
    return settings


def watches_per_namespace(*, environments: bool) -> int:
    """The watches kopf holds per namespace served (or cluster-wide): SessionMemories and Pods, and
    AgentEnvironments when the operator serves them."""
    return 3 if environments else 2


def bounded_session(
    info: kopf.ConnectionInfo,
    *,
    watches: int | None,
    traces: Sequence[aiohttp.TraceConfig] = (),
    user_agent: str | None = None,
) -> kopf.AiohttpSession:
    """kopf's API session for ``info``'s server and credentials, with at most ``KOPF_REQUESTS`` requests in
    flight besides its ``watches`` (each holds a connection for as long as it runs; None: a number not known
    in advance, as with namespace globs, and no bound). ``traces`` see every request (the leadership fence,
    the liveness probe's watch signals). Call it in the event loop (kopf's login handlers are)."""
    headers = dict(info.as_http_headers())
    if user_agent:
        headers["User-Agent"] = user_agent
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=0 if watches is None else KOPF_REQUESTS + watches, ssl=info.as_ssl_context()
        ),
        headers=headers,
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        trace_configs=list(traces),
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        aiohttp_session=session,
    )
