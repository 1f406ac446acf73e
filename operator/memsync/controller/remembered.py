"""What one operator process remembers per session, kept to what the controller reads again.

The status writes start from the SessionMemory as this process last read or wrote it, and the Pod watcher
keeps each session's last Pod state (a Pod that is gone is judged by it). Both are kept per session for as
long as it exists, so at 1,000 sessions their size is the operator's size: a SessionMemory is remembered as
its identity, generation and status (its store paths, all that the status needs of the spec, are derived
once per generation), a Pod as the fields ``status.derive_status``, ``health.health_url`` and the deletion
read. Everything else (the spec and the Pod template, managedFields, annotations, container images, ...)
is dropped as soon as a response is parsed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from memsync.controller import metrics
from memsync.controller import status as st
from memsync.controller.coalescing import Coalescer
from memsync.controller.kube import CALL_THREADS, KubeApi
from memsync.controller.objects import meta_of
from memsync.controller.pod import SYNC_CONTAINER
from memsync.controller.settings import ControllerConfig
from memsync.crd.models import SessionMemorySpec, validate_spec
from memsync.crd.spec_messages import InvalidSpecError, plain

#: Handler steps that run at once. kopf starts a handler for every object at once: a burst of 1,000 new
#: SessionMemories would otherwise hold 1,000 objects, Pod manifests and responses while they all queue
#: for the API client's threads (which serve ``CALL_THREADS`` calls at a time anyway).
HANDLER_SLOTS: Final = 2 * CALL_THREADS

#: memoryStoreId -> effective mount path (None when the spec is invalid), in the spec's order.
StorePaths = dict[str, str | None]
Key = tuple[str, str]

_OBJECT_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
)
_POD_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_POD_STATUS: Final = ("phase", "reason", "message", "podIP")
_CONTAINER_STATUS: Final = ("name", "ready", "started", "state")
_CONDITION: Final = ("type", "status", "reason", "message")


def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """Copies (``plain``) of ``keys`` of ``source``: nothing kept shares a part of the object it came from."""
    return {k: plain(source[k]) for k in keys if k in source} if isinstance(source, Mapping) else {}


def identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Kind, name, namespace and uid of ``obj``: all that a step reading the object afresh needs."""
    return {**_pick(obj, ("apiVersion", "kind")), "metadata": meta_of(obj).reference()}


def object_digest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A SessionMemory as a status write and the re-check need it: kind, identity, generation,
    resourceVersion, status, and of the spec only the sidecar's start time."""
    out = _pick(obj, ("apiVersion", "kind"))
    out["metadata"] = _pick(obj.get("metadata"), _OBJECT_META)
    out.update(_pick(obj, ("status",)))
    spec = obj.get("spec")
    sync = _pick(spec.get("sync") if isinstance(spec, Mapping) else None, ("sidecarStartSeconds",))
    if sync:
        out["spec"] = {"sync": sync}
    return out


def pod_digest(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod as the status, the health poll and the deletion read it (its spec only for its grace period
    and the sync sidecar's ports; per container only name, readiness and state)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    out_spec = _pick(spec, ("terminationGracePeriodSeconds",))
    sync = [
        _pick(c, ("name", "ports"))
        for c in spec.get("initContainers") or []
        if isinstance(c, Mapping) and c.get("name") == SYNC_CONTAINER
    ]
    if sync:
        out_spec["initContainers"] = sync
    status = pod.get("status")
    out_status = _pick(status, _POD_STATUS)
    if isinstance(status, Mapping):
        for key in ("initContainerStatuses", "containerStatuses"):
            if isinstance(status.get(key), list | tuple):
                out_status[key] = [_pick(c, _CONTAINER_STATUS) for c in status[key]]
        # Of the conditions, only a disruption (eviction, preemption, node shutdown) changes the outcome.
        if isinstance(status.get("conditions"), list | tuple):
            disruptions = [
                _pick(c, _CONDITION)
                for c in status["conditions"]
                if isinstance(c, Mapping) and c.get("type") == st.DISRUPTION_TARGET
            ]
            if disruptions:
                out_status["conditions"] = disruptions
    return {"metadata": _pick(pod.get("metadata"), _POD_META), "spec": out_spec, "status": out_status}


def paths_of(spec: SessionMemorySpec | None, raw_spec: Mapping[str, Any]) -> StorePaths:
    """The store paths of an already validated ``spec``; of ``raw_spec`` (no paths) when it was invalid."""
    if spec is not None:
        return {s.memory_store_id: s.effective_mount_path for s in spec.stores or []}
    out: StorePaths = {}
    for store in raw_spec.get("stores") or []:
        if isinstance(store, Mapping) and isinstance(store.get("memoryStoreId"), str):
            out.setdefault(store["memoryStoreId"], None)
    return out


def store_paths(raw_spec: Mapping[str, Any]) -> StorePaths:
    """memoryStoreId -> effective mount path, in the spec's order (tolerates an invalid spec)."""
    try:
        spec: SessionMemorySpec | None = validate_spec(raw_spec)
    except InvalidSpecError:
        spec = None
    return paths_of(spec, raw_spec)


@dataclass(frozen=True)
class SeenPod:
    """The last state of a SessionMemory's Pod that the Pod watcher saw (``gone``: its DELETED event)."""

    owner_uid: str
    pod: Mapping[str, Any]
    gone: bool


@dataclass
class Runtime:
    """The shared state of one operator process (kopf hands it to every handler through ``memo``)."""

    kube: KubeApi
    config: ControllerConfig
    clock: Callable[[], dt.datetime] = st.now_utc
    locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    # When the deletion first saw the Pod gone (monotonic seconds), per SessionMemory.
    gone_since: dict[Key, float] = field(default_factory=dict)
    # When a Pod create was first refused for a missing ServiceAccount (monotonic seconds), per SessionMemory.
    service_account_missing_since: dict[Key, float] = field(default_factory=dict)
    # Pods (by uid) this operator process created or has already announced as adopted.
    known_pods: set[str] = field(default_factory=set)
    # The last Pod state the watcher saw (``pod_digest``), per SessionMemory (namespace, name).
    seen_pods: dict[Key, SeenPod] = field(default_factory=dict)
    # The SessionMemory as this process last read or wrote it (``object_digest``), per (namespace, name): a
    # status write starts from it instead of a read (its resourceVersion precondition catches any newer
    # change).
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # The store paths of each SessionMemory's spec (uid -> generation, paths).
    paths: dict[str, tuple[int | None, StorePaths]] = field(default_factory=dict)
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(HANDLER_SLOTS))
    # Set by the first handler kopf runs (it runs none before every SessionMemory is indexed); the
    # periodic jobs (``controller/periodic.py``, their loop in ``periodic``) wait for it.
    indexed: asyncio.Event = field(default_factory=asyncio.Event)
    periodic: asyncio.Task[None] | None = None
    # The Pod watcher's status derivations, one at a time per SessionMemory (``controller/coalescing.py``).
    pod_updates: Coalescer[Key] = field(default_factory=Coalescer)

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self.locks.setdefault((namespace, name), asyncio.Lock())

    def seen_pod(self, namespace: str, name: str, uid: str, pod_name: str) -> SeenPod | None:
        """The watcher's last view of Pod ``pod_name`` of SessionMemory ``uid``, if it saw one."""
        seen = self.seen_pods.get((namespace, name))
        if seen is None or seen.owner_uid != uid or meta_of(seen.pod).name != pod_name:
            return None
        return seen

    def see_pod(self, namespace: str, name: str, uid: str, pod: Mapping[str, Any], *, gone: bool) -> None:
        self.seen_pods[(namespace, name)] = SeenPod(owner_uid=uid, pod=pod_digest(pod), gone=gone)

    def store_paths(self, obj: Mapping[str, Any], known: StorePaths | None = None) -> StorePaths:
        """The store paths the caller already has from its one validation, else those of ``obj``'s spec
        (validated once per object and generation: every Pod event of a session needs them)."""
        if known is not None:
            return known
        meta = meta_of(obj)
        generation, paths = self.paths.get(str(meta.uid), (None, None))
        if paths is None or generation != meta.generation:
            paths = store_paths(obj.get("spec") or {})
            self.paths[str(meta.uid)] = (meta.generation, paths)
        return paths

    def remember(self, namespace: str, name: str, obj: Mapping[str, Any]) -> None:
        """Keep ``obj`` (as the API just served it, spec included) for the next status write."""
        self.store_paths(obj)  # the digest has no spec: its paths are derived now
        self.objects[(namespace, name)] = object_digest(obj)
        metrics.show_sessionmemories(self.objects.values())

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The SessionMemory as the API serves it now (remembered for the next status write)."""
        obj = await self.kube.get_session_memory(namespace, name)
        if obj is None:
            self.objects.pop((namespace, name), None)
        else:
            self.remember(namespace, name, obj)
        return obj

    def known(self, namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
        """The remembered SessionMemory, if it is the one with ``uid`` (any one when None) and its store
        paths are those of its generation."""
        obj = self.objects.get((namespace, name))
        if obj is None:
            return None
        meta = meta_of(obj)
        cached = self.paths.get(str(meta.uid))
        if (uid is not None and meta.uid != uid) or cached is None or cached[0] != meta.generation:
            return None
        return obj

    def forget(self, namespace: str, name: str) -> None:
        known = self.objects.pop((namespace, name), None)
        if known is not None:
            self.paths.pop(str(meta_of(known).uid), None)
        self.locks.pop((namespace, name), None)
        self.gone_since.pop((namespace, name), None)
        self.service_account_missing_since.pop((namespace, name), None)
        self.seen_pods.pop((namespace, name), None)
        metrics.show_sessionmemories(self.objects.values())
