"""What the operator keeps of a SessionMemory and of its Pod: digests of what the controller reads again.

The status writes start from the SessionMemory as this process last read or wrote it, and the Pod watcher
keeps each session's last Pod state (a Pod that is gone is judged by it). Both are kept per session for as
long as it exists (``state.SessionMemories``), so at 1,000 sessions their size is the operator's size: a
SessionMemory is remembered as its identity, generation and status (its store paths, all that the status
needs of the spec, are derived once per generation), a Pod as the fields ``derive.derive_status``,
``health.health_url`` and the deletion read. Everything else (the spec and the Pod template,
managedFields, annotations, container images, ...) is dropped as soon as a response is parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from memsync.controller.sessionmemory.phases import DISRUPTION_TARGET, POD_SCHEDULED
from memsync.controller.sessionmemory.pod import ANNOTATION_SPEC_HASH, SYNC_CONTAINER
from memsync.crd.models import LABEL_ATTEMPT, SessionMemorySpec, validate_spec
from memsync.crd.spec_messages import InvalidSpecError, plain

#: memoryStoreId -> effective mount path (None when the spec is invalid), in the spec's order.
StorePaths = dict[str, str | None]

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
#: Of a SessionMemory's spec, what the operator reads while the session runs (besides the sidecar's start).
_OBJECT_SPEC: Final = ("startDeadlineSeconds", "onInterruption")
_POD_STATUS: Final = ("phase", "reason", "message", "podIP")
#: Pod conditions that change the outcome or are mirrored: a disruption (eviction, preemption, node
#: shutdown) and the scheduler's verdict.
_POD_CONDITIONS: Final = (DISRUPTION_TARGET, POD_SCHEDULED)
_CONTAINER_STATUS: Final = ("name", "ready", "started", "state")
_CONDITION: Final = ("type", "status", "reason", "message")


def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """Copies (``plain``) of ``keys`` of ``source``: nothing kept shares a part of the object it came from."""
    return {k: plain(source[k]) for k in keys if k in source} if isinstance(source, Mapping) else {}


def object_digest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A SessionMemory as a status write and the re-check need it: kind, identity, generation,
    resourceVersion, status, and of the spec only the sidecar's start time, the start deadline and what an
    interruption does."""
    out = _pick(obj, ("apiVersion", "kind"))
    out["metadata"] = _pick(obj.get("metadata"), _OBJECT_META)
    out.update(_pick(obj, ("status",)))
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    kept = _pick(spec, _OBJECT_SPEC)
    sync = _pick(spec.get("sync"), ("sidecarStartSeconds",))
    if sync:
        kept["sync"] = sync
    if kept:
        out["spec"] = kept
    return out


def pod_digest(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod as the status, the health poll and the deletion read it (its spec only for its grace period,
    its node and the sync sidecar's ports; per container only name, readiness and state; its attempt and
    the hash of the spec it was built from)."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    out_spec = _pick(spec, ("terminationGracePeriodSeconds", "nodeName"))
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
        if isinstance(status.get("conditions"), list | tuple):
            kept = [
                _pick(c, _CONDITION)
                for c in status["conditions"]
                if isinstance(c, Mapping) and c.get("type") in _POD_CONDITIONS
            ]
            if kept:
                out_status["conditions"] = kept
    meta = pod.get("metadata")
    out_meta = _pick(meta, _POD_META)
    if isinstance(meta, Mapping):
        labels = _pick(meta.get("labels"), (LABEL_ATTEMPT,))
        annotations = _pick(meta.get("annotations"), (ANNOTATION_SPEC_HASH,))
        if labels:
            out_meta["labels"] = labels
        if annotations:
            out_meta["annotations"] = annotations
    return {"metadata": out_meta, "spec": out_spec, "status": out_status}


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
