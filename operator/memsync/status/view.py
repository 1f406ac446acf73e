"""SessionMemories, their Pods and Events as people read them: pure functions over plain dicts.

Everything here takes the objects as the API server serves them (camelCase dicts, any field possibly
missing) and ``now`` from the caller. Nothing is fetched, and nothing of a Secret or of the sandbox's
environment is ever read: only the SessionMemory's status, its session id and store ids, the Pod's
container states and the Events' reasons and messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, cast

from memsync.contracts.report import StoreCounts
from memsync.controller.sessionmemory.derive import counts_of, named_as_failing
from memsync.crd.models import (
    CONDITION_FLUSHED,
    CONDITION_READY,
    CONDITION_SYNCED,
    KIND,
    Phase,
)
from memsync.crd.status_types import Condition, SessionMemoryStatus, StoreStatus

# How one store of a session is doing (the STORES column and the detail's HEALTH column).
IN_SYNC: Final = "in-sync"  # the last sync pass of the store succeeded
FAILING: Final = "failing"  # its last pass failed (the Synced condition names it and the error)
PENDING: Final = "pending"  # no sync pass has finished yet
UNKNOWN: Final = "unknown"  # the operator cannot read the sidecar's sync status
FLUSHED: Final = "flushed"  # the session ended and its final flush sent everything
UNSAVED: Final = "unsaved"  # the session ended with changed files the final flush did not save
REFUSED: Final = (
    "refused"  # the session ended, its final flush sent all it could, but some files were refused
)
UNCONFIRMED: Final = "unconfirmed"  # the session ended and no final flush was reported
NOT_MOUNTED: Final = "not-mounted"  # the session ended before the store was mounted

_ENDED: Final = frozenset({Phase.SUCCEEDED.value, Phase.FAILED.value})
#: Events shown in the detail view, newest last.
RECENT_EVENTS: Final = 10
NONE: Final = "<none>"


@dataclass(frozen=True)
class StoreRow:
    store_id: str
    label: str  # the store's folder name under /mnt/memory, else its id
    mount_path: str | None
    health: str
    memories_mounted: int | None
    counts: StoreCounts  # the session's so far: uploads, conflicts, refused paths...


@dataclass(frozen=True)
class SessionSummary:
    namespace: str
    name: str
    session_id: str | None
    phase: str
    ready: str | None  # the Ready condition's status
    synced: str | None  # the Synced condition's status
    stores: tuple[StoreRow, ...]
    last_sync_time: str | None
    conflicts: int
    created: str | None
    pod_name: str | None
    message: str | None


@dataclass(frozen=True)
class ConditionRow:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str | None


@dataclass(frozen=True)
class ContainerRow:
    name: str
    role: str  # init, sidecar or main
    state: str  # waiting, running, terminated or absent
    ready: bool
    restarts: int
    detail: str  # exit code and reason, or why it waits


@dataclass(frozen=True)
class PodSummary:
    name: str
    phase: str
    node: str | None
    ip: str | None
    terminating: bool
    containers: tuple[ContainerRow, ...]


@dataclass(frozen=True)
class EventRow:
    type: str
    reason: str
    object: str  # Kind/name
    message: str
    count: int
    last_seen: str | None


@dataclass(frozen=True)
class SessionDetail:
    summary: SessionSummary
    conditions: tuple[ConditionRow, ...]
    pod: PodSummary | None
    events: tuple[EventRow, ...]


# --------------------------------------------------------------------------------------------------
# Plain data -> summaries
# --------------------------------------------------------------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _status_of(obj: Mapping[str, Any]) -> SessionMemoryStatus:
    """The object's status as the operator writes it (read tolerantly: every field is checked on use)."""
    return cast(SessionMemoryStatus, _map(obj.get("status")))


def _conditions(status: SessionMemoryStatus) -> dict[str, Condition]:
    found: dict[str, Condition] = {}
    for entry in status.get("conditions") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("type"), str):
            found[entry["type"]] = entry
    return found


def store_health(phase: str, conditions: Mapping[str, Condition], store_id: str, counts: StoreCounts) -> str:
    """How one store is doing, from the session's phase, its conditions and the store's counts."""
    if phase in _ENDED:
        return _ended_health(conditions.get(CONDITION_FLUSHED) or {}, counts)
    synced = conditions.get(CONDITION_SYNCED)
    if synced is None:
        return PENDING
    status = synced.get("status")
    if status == "True":
        return IN_SYNC
    if status == "False":
        if named_as_failing(synced, store_id):
            return FAILING
        return IN_SYNC if synced.get("reason") == "SyncFailing" else FAILING
    return PENDING if synced.get("reason") == "FirstSyncPending" else UNKNOWN


def _ended_health(flushed: Condition, counts: StoreCounts) -> str:
    """How one store of an ended session is: its final flush's outcome and the store's counts."""
    if counts.unsent:
        return UNSAVED
    if flushed.get("status") != "True":
        return UNCONFIRMED
    if flushed.get("reason") == "NothingToFlush":
        return NOT_MOUNTED
    return REFUSED if counts.refused else FLUSHED


def summarize(obj: Mapping[str, Any]) -> SessionSummary:
    """One SessionMemory as a summary; tolerant of any missing or odd field (a status not written yet)."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    status = _status_of(obj)
    phase = _text(status.get("phase")) or Phase.PENDING.value
    conditions = _conditions(status)
    entries: list[StoreStatus] = [e for e in status.get("stores") or [] if isinstance(e, Mapping)]
    seen = {str(e.get("memoryStoreId")) for e in entries}
    names: dict[str, str] = {}
    # Stores of the spec the status does not list yet (a status not written yet) still show, as pending.
    for store in spec.get("stores") or []:
        sid, name = _map(store).get("memoryStoreId"), _text(_map(store).get("name"))
        if isinstance(sid, str) and name:
            names[sid] = name
        if isinstance(sid, str) and sid not in seen:
            entries.append({"memoryStoreId": sid})
            seen.add(sid)
    rows = tuple(_store_row(phase, conditions, e, names) for e in entries)
    return SessionSummary(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        session_id=_text(spec.get("sessionId")),
        phase=phase,
        ready=_text(_map(conditions.get(CONDITION_READY)).get("status")),
        synced=_text(_map(conditions.get(CONDITION_SYNCED)).get("status")),
        stores=rows,
        last_sync_time=_text(status.get("lastSyncTime")),
        conflicts=sum(r.counts.conflicts for r in rows),
        created=_text(meta.get("creationTimestamp")),
        pod_name=_text(status.get("podName")),
        message=_text(status.get("message")),
    )


def _store_row(
    phase: str, conditions: Mapping[str, Condition], entry: StoreStatus, names: Mapping[str, str]
) -> StoreRow:
    """``names``: the spec's store names, the label until the status carries the mount path."""
    mounted = entry.get("memoriesMounted")
    store_id = str(entry.get("memoryStoreId") or "")
    mount_path = _text(entry.get("mountPath"))
    folder = mount_path.rstrip("/").rsplit("/", 1)[-1] if mount_path else ""
    counts = counts_of(entry)
    return StoreRow(
        store_id=store_id,
        label=folder or names.get(store_id) or store_id,
        mount_path=mount_path,
        health=store_health(phase, conditions, store_id, counts),
        memories_mounted=_count(mounted) if mounted is not None else None,
        counts=counts,
    )


def sort_summaries(summaries: Iterable[SessionSummary]) -> list[SessionSummary]:
    return sorted(summaries, key=lambda s: (s.namespace, s.name))


def _container_rows(statuses: Any, role_of: Mapping[str, str], default_role: str) -> list[ContainerRow]:
    rows: list[ContainerRow] = []
    for entry in statuses if isinstance(statuses, list) else []:
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name") or "")
        state = _map(entry.get("state"))
        detail = ""
        if "terminated" in state:
            term = _map(state["terminated"])
            kind = "terminated"
            code = term.get("exitCode")
            detail = f"exit {code}" if isinstance(code, int) else "exit ?"
            if _text(term.get("reason")):
                detail += f" ({term['reason']})"
        elif "running" in state:
            kind = "running"
        elif "waiting" in state:
            kind = "waiting"
            wait = _map(state["waiting"])
            detail = " ".join(x for x in (_text(wait.get("reason")), _text(wait.get("message"))) if x)
        else:
            kind = "absent"
        rows.append(
            ContainerRow(
                name=name,
                role=role_of.get(name, default_role),
                state=kind,
                ready=entry.get("ready") is True,
                restarts=_count(entry.get("restartCount")),
                detail=detail,
            )
        )
    return rows


def summarize_pod(pod: Mapping[str, Any]) -> PodSummary:
    """The Pod's phase, place and container states (never its spec: no command, no environment)."""
    meta, spec, status = _map(pod.get("metadata")), _map(pod.get("spec")), _map(pod.get("status"))
    roles = {
        str(_map(c).get("name")): "sidecar" if _map(c).get("restartPolicy") == "Always" else "init"
        for c in spec.get("initContainers") or []
    }
    return PodSummary(
        name=str(meta.get("name") or ""),
        phase=_text(status.get("phase")) or "Pending",
        node=_text(spec.get("nodeName")),
        ip=_text(status.get("podIP")),
        terminating=bool(meta.get("deletionTimestamp")),
        containers=tuple(
            _container_rows(status.get("initContainerStatuses"), roles, "init")
            + _container_rows(status.get("containerStatuses"), {}, "main")
        ),
    )


def _event_time(event: Mapping[str, Any]) -> str | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = _text(event.get(key))
        if value:
            return value
    series = _map(event.get("series"))
    return _text(series.get("lastObservedTime")) or _text(
        _map(event.get("metadata")).get("creationTimestamp")
    )


def recent_events(
    events: Iterable[Mapping[str, Any]], involved: Sequence[tuple[str, str]], limit: int = RECENT_EVENTS
) -> list[EventRow]:
    """The newest ``limit`` Events about the given (kind, name) objects, oldest first."""
    wanted = set(involved)
    rows: list[tuple[datetime, EventRow]] = []
    for event in events:
        target = _map(event.get("involvedObject"))
        key = (str(target.get("kind") or ""), str(target.get("name") or ""))
        if key not in wanted:
            continue
        when = _event_time(event)
        count = _count(event.get("count")) or _count(_map(event.get("series")).get("count")) or 1
        rows.append(
            (
                parse_time(when) or datetime.min.replace(tzinfo=UTC),
                EventRow(
                    type=str(event.get("type") or "Normal"),
                    reason=str(event.get("reason") or ""),
                    object=f"{key[0]}/{key[1]}",
                    message=str(event.get("message") or "").strip(),
                    count=count,
                    last_seen=when,
                ),
            )
        )
    rows.sort(key=lambda pair: pair[0])
    return [row for _, row in rows[-limit:]] if limit > 0 else []


def detail(
    obj: Mapping[str, Any], pod: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]]
) -> SessionDetail:
    summary = summarize(obj)
    conditions = tuple(
        ConditionRow(
            type=str(c.get("type")),
            status=str(c.get("status") or "Unknown"),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            last_transition_time=_text(c.get("lastTransitionTime")),
        )
        for c in _conditions(_status_of(obj)).values()
    )
    involved = [(KIND, summary.name)]
    pod_summary = summarize_pod(pod) if pod is not None else None
    if summary.pod_name:
        involved.append(("Pod", summary.pod_name))
    return SessionDetail(summary, conditions, pod_summary, tuple(recent_events(events, involved)))


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
