"""A sandbox Pod as far as the SessionMemory's status is concerned: its containers' states, read tolerantly.

The Pod is the raw camelCase dict the API serves (or its digest, ``digest.pod_digest``); any missing or odd
field reads as absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from memsync.controller.sessionmemory.phases import DISRUPTION_TARGET, EVICTED, POD_SCHEDULED
from memsync.controller.sessionmemory.pod import MOUNT_CONTAINER, SANDBOX_CONTAINER, SYNC_CONTAINER

ContainerStateName = Literal["waiting", "running", "terminated", "absent"]


@dataclass(frozen=True)
class ContainerView:
    state: ContainerStateName = "absent"
    ready: bool = False
    started: bool = False  # the kubelet's "started" (a sidecar's startupProbe passed)
    exit_code: int | None = None
    reason: str | None = None  # waiting or terminated reason (e.g. ErrImagePull, OOMKilled, Error)
    detail: str | None = None  # waiting message (e.g. why an image pull fails)
    message: str | None = None  # the terminated state's termination message
    finished_at: str | None = None  # the terminated state's finishedAt


@dataclass(frozen=True)
class PodScheduled:
    """The Pod's ``PodScheduled`` condition (the scheduler's verdict: ``Unschedulable`` and why)."""

    status: str  # True, False or Unknown
    reason: str | None
    message: str | None


@dataclass(frozen=True)
class PodView:
    name: str
    phase: str  # the Pod's own phase: Pending, Running, Succeeded, Failed, Unknown
    deleting: bool
    reason: str | None
    message: str | None
    mount: ContainerView
    sync: ContainerView
    sandbox: ContainerView
    disruption: str | None = None  # "reason: message" of a DisruptionTarget condition that is True
    scheduled: PodScheduled | None = None  # the PodScheduled condition, when the Pod has one
    node: str | None = None  # spec.nodeName, once scheduled


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _container_view(statuses: Any, name: str) -> ContainerView:
    if not isinstance(statuses, list):
        return ContainerView()
    for entry in statuses:
        if not isinstance(entry, dict) or entry.get("name") != name:
            continue
        state = entry.get("state")
        state = state if isinstance(state, dict) else {}
        ready = entry.get("ready") is True
        started = entry.get("started") is True
        terminated = state.get("terminated")
        if isinstance(terminated, dict):
            code = terminated.get("exitCode")
            return ContainerView(
                state="terminated",
                ready=ready,
                started=started,
                exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                reason=_str(terminated.get("reason")),
                message=_str(terminated.get("message")),
                finished_at=_str(terminated.get("finishedAt")),
            )
        if isinstance(state.get("running"), dict):
            return ContainerView(state="running", ready=ready, started=started)
        waiting = state.get("waiting")
        waiting = waiting if isinstance(waiting, dict) else {}
        return ContainerView(
            state="waiting",
            ready=ready,
            started=started,
            reason=_str(waiting.get("reason")),
            detail=_str(waiting.get("message")),
        )
    return ContainerView()


def _disruption(status: Mapping[str, Any]) -> str | None:
    """What disrupted the Pod, as "reason: message": its DisruptionTarget condition (the Eviction API, a
    pressure eviction, preemption, a node shutdown), or the kubelet's own eviction for local storage (an
    emptyDir over its sizeLimit, a container over its ephemeral-storage limit), which sets the Pod's reason
    ``Evicted`` and no condition."""
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list | tuple) else ():
        if not isinstance(cond, Mapping) or cond.get("type") != DISRUPTION_TARGET:
            continue
        if cond.get("status") == "True":
            reason, message = _str(cond.get("reason")), _str(cond.get("message"))
            return ": ".join(part for part in (reason or "Disrupted", message) if part)
    if status.get("reason") == EVICTED:
        return ": ".join(part for part in (EVICTED, _str(status.get("message"))) if part)
    return None


def _scheduled(status: Mapping[str, Any]) -> PodScheduled | None:
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list | tuple) else ():
        if isinstance(cond, Mapping) and cond.get("type") == POD_SCHEDULED:
            return PodScheduled(
                str(cond.get("status") or "Unknown"), _str(cond.get("reason")), _str(cond.get("message"))
            )
    return None


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """The parts of a Pod that the status depends on; tolerant of any missing or odd field."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    status = pod.get("status")
    status = status if isinstance(status, Mapping) else {}
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    init_statuses = status.get("initContainerStatuses")
    return PodView(
        name=str(meta.get("name") or ""),
        phase=_str(status.get("phase")) or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        reason=_str(status.get("reason")),
        message=_str(status.get("message")),
        mount=_container_view(init_statuses, MOUNT_CONTAINER),
        sync=_container_view(init_statuses, SYNC_CONTAINER),
        sandbox=_container_view(status.get("containerStatuses"), SANDBOX_CONTAINER),
        disruption=_disruption(status),
        scheduled=_scheduled(status),
        node=_str(spec.get("nodeName")),
    )


# --------------------------------------------------------------------------------------------------
# Conditions
# --------------------------------------------------------------------------------------------------


_NORMAL_WAITING: Final = frozenset({"PodInitializing", "ContainerCreating"})


def waiting_reason(container: ContainerView) -> str | None:
    """Why a container waits, when the reason is worth showing (e.g. ImagePullBackOff), else None."""
    if container.state != "waiting" or not container.reason or container.reason in _NORMAL_WAITING:
        return None
    return f"{container.reason}: {container.detail}" if container.detail else container.reason
