"""A SessionMemory's status, derived from its sandbox Pod: pure functions over plain dicts.

The controller reads a Pod (a raw camelCase dict, as the API serves it) and the SessionMemory's previous
status, and gets back the complete new status. Nothing here talks to Kubernetes, reads a clock or logs;
``now`` is passed in. The same inputs always give the same output, so a handler that runs twice writes
nothing the second time.

Phases move forward only: Pending -> Mounting -> Running -> Flushing -> Succeeded | Failed.

- Pending: the Pod exists but ``memsync-mount`` has not started.
- Mounting: ``memsync-mount`` is downloading the stores, or it has finished and the sandbox container or
  the sync sidecar is not up yet.
- Running: the sandbox container runs and the ``memsync-sync`` sidecar was ready. It stays Running if the
  sidecar later turns unready (the ``Ready`` condition then says so).
- Flushing: the Pod is terminating, or the sandbox container has ended while the sidecar does its final
  sync and flush.
- Succeeded: the sandbox ended well (exit 0, or ended by the Pod's deletion) and the sidecar reported a
  complete final flush.
- Failed: a refusal before any Pod (invalid spec, duplicate session, missing Secret or key, a Secret the
  operator may not read, a Pod the API refused), a failed
  mount, a failed sandbox, a sandbox killed at the end of the grace period because it ignored SIGTERM,
  a final flush that left files unsent or was never reported, a Pod that
  disappeared without reporting an end, or a deletion that gave up waiting for the Pod.

Live sync health (the ``Synced`` condition, ``lastSyncTime``, running totals) comes from the sidecar's
``/status`` document through ``health_status``; once the session ends, its final report decides.

The sync agent reports through termination messages (one line of JSON, see the agent's contract):
``{"phase":"mounted",...}`` from ``memsync-mount``, ``{"phase":"mount_failed",...}`` when it fails, and
``{"phase":"flushed",...}`` from ``memsync-sync`` at shutdown. A missing, truncated or malformed message
never breaks the derivation: it is reported as "not reported". So is a complete report left by a sidecar
that did not exit 0: the preStop ``memsync flush`` writes the termination log too, so that report is an
earlier flush's whenever the final one was killed before it could report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic.alias_generators import to_camel

from memsync.contracts.health import SyncHealth
from memsync.contracts.report import (
    BASE_COUNTS,
    CUMULATIVE,
    FINAL_ONLY,
    MESSAGE_LIMIT,
    FlushReport,
    MountFailure,
    MountReport,
    StoreCounts,
    parse_report,
)
from memsync.controller.pod import MOUNT_CONTAINER, SANDBOX_CONTAINER, SYNC_CONTAINER
from memsync.crd.models import (
    CONDITION_FLUSHED,
    CONDITION_READY,
    CONDITION_STORES_MOUNTED,
    CONDITION_SYNCED,
    Phase,
)

PENDING: Final = Phase.PENDING.value
MOUNTING: Final = Phase.MOUNTING.value
RUNNING: Final = Phase.RUNNING.value
FLUSHING: Final = Phase.FLUSHING.value
SUCCEEDED: Final = Phase.SUCCEEDED.value
FAILED: Final = Phase.FAILED.value
TERMINAL_PHASES: Final = frozenset({SUCCEEDED, FAILED})
_RANK: Final = {PENDING: 0, MOUNTING: 1, RUNNING: 2, FLUSHING: 3}

READY: Final = CONDITION_READY
STORES_MOUNTED: Final = CONDITION_STORES_MOUNTED
FLUSHED: Final = CONDITION_FLUSHED
SYNCED: Final = CONDITION_SYNCED
CONDITION_TYPES: Final = (READY, STORES_MOUNTED, FLUSHED, SYNCED)

# Reasons of the refusals that happen before any Pod exists. They are re-evaluated (the user may fix the
# spec, create the Secret, or delete the older duplicate); every other Failed is final.
INVALID_SPEC: Final = "InvalidSpec"
DUPLICATE_SESSION: Final = "DuplicateSession"
SECRET_NOT_FOUND: Final = "SecretNotFound"  # noqa: S105 - a reason, not a password
SECRET_KEY_NOT_FOUND: Final = "SecretKeyNotFound"  # noqa: S105 - a reason, not a password
POD_NAME_TAKEN: Final = "PodNameTaken"
# The API refused the operator's request (admission: Pod Security, ResourceQuota, LimitRange, an invalid
# field; or RBAC on the Secret read): the message is the API's own.
POD_REJECTED: Final = "PodRejected"
SECRET_FORBIDDEN: Final = "SecretForbidden"  # noqa: S105 - a reason, not a password
# The Pod's ServiceAccount did not appear within the operator's --service-account-wait.
SERVICE_ACCOUNT_NOT_FOUND: Final = "ServiceAccountNotFound"
REFUSAL_REASONS: Final = frozenset(
    {
        INVALID_SPEC,
        DUPLICATE_SESSION,
        SECRET_NOT_FOUND,
        SECRET_KEY_NOT_FOUND,
        POD_NAME_TAKEN,
        POD_REJECTED,
        SECRET_FORBIDDEN,
        SERVICE_ACCOUNT_NOT_FOUND,
    }
)

# Reasons of the Pod-derived outcomes.
MOUNT_FAILED: Final = "MountFailed"
SANDBOX_FAILED: Final = "SandboxFailed"
SANDBOX_KILLED: Final = "SandboxKilled"
#: The Pod carried a DisruptionTarget condition: evicted (by the Eviction API or the kubelet), preempted, or
#: stopped by a node shutdown or a taint; the session did not end of its own accord.
INTERRUPTED: Final = "Interrupted"
#: The kubelet ended the Pod at its ``activeDeadlineSeconds``.
DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
#: The Pod condition the API server and the kubelet set on a Pod they are about to end for a disruption.
DISRUPTION_TARGET: Final = "DisruptionTarget"
#: The Pod reason of every kubelet eviction (local-storage evictions set it without a DisruptionTarget).
EVICTED: Final = "Evicted"
POD_FAILED: Final = "PodFailed"
POD_LOST: Final = "PodLost"
DELETION_TIMED_OUT: Final = "DeletionTimedOut"
#: memsync-sync had not started (its startupProbe never passed) within the sidecar start time after the
#: mount: the operator failed the session and deleted its Pod (the sandbox never ran).
SIDECAR_NOT_STARTED: Final = "SidecarNotStarted"
#: Outcomes the operator itself decided; what the Pod reports afterwards (its deletion) does not replace them.
OPERATOR_VERDICTS: Final = frozenset({SIDECAR_NOT_STARTED})
FLUSH_INCOMPLETE: Final = "FlushIncomplete"
FLUSH_NOT_REPORTED: Final = "FlushNotReported"
SESSION_SUCCEEDED: Final = "SessionSucceeded"

# Reasons of the Synced condition.
IN_SYNC: Final = "InSync"
SYNC_FAILING: Final = "SyncFailing"
FIRST_SYNC_PENDING: Final = "FirstSyncPending"
STATUS_UNAVAILABLE: Final = "StatusUnavailable"

ConditionStatus = Literal["True", "False", "Unknown"]
Status = dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Termination messages: the agent's report (``memsync.contracts.report``), parsed leniently there
# --------------------------------------------------------------------------------------------------

parse_termination_message = parse_report


# --------------------------------------------------------------------------------------------------
# The Pod, as far as the status is concerned
# --------------------------------------------------------------------------------------------------

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


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """The parts of a Pod that the status depends on; tolerant of any missing or odd field."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    status = pod.get("status")
    status = status if isinstance(status, Mapping) else {}
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
    )


# --------------------------------------------------------------------------------------------------
# Conditions
# --------------------------------------------------------------------------------------------------


def format_time(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes metav1.Time."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Cond:
    type: str
    status: ConditionStatus
    reason: str
    message: str


def merge_conditions(
    previous: Any, wanted: Sequence[Cond], *, generation: int | None, now: datetime
) -> list[dict[str, Any]]:
    """The new condition list: ``lastTransitionTime`` moves only when a condition's status flips.

    Reason and message follow the current state (a Failed mount changes the message of a condition that
    was already False). Conditions of other types (written by someone else) are kept as they are.
    """
    before: dict[str, dict[str, Any]] = {}
    others: list[dict[str, Any]] = []
    wanted_types = {c.type for c in wanted}
    for item in previous if isinstance(previous, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            continue
        if item["type"] in wanted_types:
            before[item["type"]] = item
        else:
            others.append(dict(item))
    result: list[dict[str, Any]] = []
    for cond in wanted:
        old = before.get(cond.type)
        stamp = format_time(now)
        if (
            old is not None
            and old.get("status") == cond.status
            and isinstance(old.get("lastTransitionTime"), str)
        ):
            stamp = old["lastTransitionTime"]
        entry: dict[str, Any] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message[:MESSAGE_LIMIT],
            "lastTransitionTime": stamp,
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        result.append(entry)
    return result + others


def condition(status: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    """One condition of a status, or None."""
    for entry in status.get("conditions") or []:
        if isinstance(entry, dict) and entry.get("type") == type_:
            return entry
    return None


# --------------------------------------------------------------------------------------------------
# Derivation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the Pod says, before it is turned into status fields."""

    phase: str
    ready: Cond
    mounted: Cond
    flushed: Cond
    message: str
    mount_report: MountReport | None = None
    flush_report: FlushReport | None = None
    last_sync: str | None = None  # when the Pod last reported a sync (mount or final flush), RFC 3339
    synced: Cond | None = None  # the final word on sync health, once the session has ended


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


_NORMAL_WAITING: Final = frozenset({"PodInitializing", "ContainerCreating"})


def _waiting(container: ContainerView) -> str | None:
    """Why a container waits, when the reason is worth showing (e.g. ImagePullBackOff), else None."""
    if container.state != "waiting" or not container.reason or container.reason in _NORMAL_WAITING:
        return None
    return f"{container.reason}: {container.detail}" if container.detail else container.reason


def _mounted_cond(view: PodView) -> tuple[Cond, MountReport | MountFailure | None]:
    mount = view.mount
    if mount.state == "terminated":
        report = parse_termination_message(mount.message)
        if mount.exit_code == 0:
            if isinstance(report, MountReport):
                total = sum(report.memories.values())
                text = (
                    f"memsync-mount materialised {_plural(total, 'memory', 'memories')} "
                    f"from {_plural(len(report.memories), 'store')}"
                )
                return Cond(STORES_MOUNTED, "True", "Mounted", text), report
            return Cond(STORES_MOUNTED, "True", "Mounted", "memsync-mount finished (it sent no report)"), None
        if isinstance(report, MountFailure):
            return Cond(STORES_MOUNTED, "False", MOUNT_FAILED, report.error), report
        code = "?" if mount.exit_code is None else str(mount.exit_code)
        why = f" ({mount.reason})" if mount.reason else ""
        text = f"memsync-mount exited with code {code}{why} without a readable report"
        return Cond(STORES_MOUNTED, "False", MOUNT_FAILED, text), None
    if mount.state == "running":
        return Cond(STORES_MOUNTED, "False", "Mounting", "memsync-mount is downloading the stores"), None
    waiting = _waiting(mount)
    if waiting:
        return Cond(STORES_MOUNTED, "False", "MountPending", f"memsync-mount is waiting: {waiting}"), None
    return Cond(STORES_MOUNTED, "False", "MountPending", "memsync-mount has not started yet"), None


def _flush_summary(report: FlushReport) -> str:
    stores = report.stores.values()
    totals = StoreCounts(
        uploaded=sum(s.uploaded for s in stores),
        deleted=sum(s.deleted for s in stores),
        conflicts=sum(s.conflicts for s in stores),
        refused=sum(s.refused for s in stores),
        unsent=sum(s.unsent for s in stores),
        unreadable=sum(s.unreadable for s in stores),
        held_deletes=sum(s.held_deletes for s in stores),
    )
    text = (
        f"uploaded {totals.uploaded}, deleted {totals.deleted}, conflicts {totals.conflicts}, "
        f"refused {totals.refused}, unsent {totals.unsent} across {_plural(len(report.stores), 'store')}"
    )
    if totals.refused:
        refused = sorted({p for s in stores for p in s.refused_paths})
        sample = f" ({', '.join('/' + p for p in refused)})" if refused else ""
        text += f"; {_plural(totals.refused, 'refused file')} never reached the store{sample}"
    if totals.unreadable:
        text += f"; {_plural(totals.unreadable, 'file')} could not be read"
    if totals.held_deletes:
        held = sorted({p for s in stores for p in s.held_delete_paths})
        text += (
            f"; {_plural(totals.held_deletes, 'local deletion')} held back by the delete cap stay in the "
            f"store ({', '.join('/' + p for p in held)})"
        )
    if not report.complete:
        unsent = sorted(sid for sid, s in report.stores.items() if s.unsent)
        where = f" (unsent in {', '.join(unsent)})" if unsent else ""
        return f"the final flush was incomplete: {text}{where}"
    return f"the final flush completed: {text}"


#: What a container runtime reports for a process ended by SIGKILL (128 + 9).
SIGKILL_EXIT_CODE: Final = 137


def _killed_at_deadline(view: PodView) -> bool:
    """The sandbox was SIGKILLed while the Pod was being deleted (not OOM): it ignored its SIGTERM."""
    sandbox = view.sandbox
    return (
        view.deleting
        and sandbox.state == "terminated"
        and sandbox.exit_code == SIGKILL_EXIT_CODE
        and sandbox.reason != "OOMKilled"
    )


def _terminal_outcome(view: PodView, mounted: Cond, pod_gone: bool) -> Outcome | None:
    """The outcome of a Pod that has ended (or is gone), or None while it still runs."""
    sandbox, sync = view.sandbox, view.sync
    pod_ended = view.phase in ("Succeeded", "Failed")
    sandbox_ended = sandbox.state == "terminated"
    if not (pod_ended or pod_gone or (sandbox_ended and sync.state == "terminated")):
        return None

    flush_report = parse_termination_message(sync.message) if sync.state == "terminated" else None
    flush = flush_report if isinstance(flush_report, FlushReport) else None
    ever_mounted = mounted.status == "True"
    stale = flush is not None and flush.complete and sync.exit_code not in (0, None)
    if stale:
        # A complete final flush exits 0. A complete report with another exit code was written by an
        # earlier flush (the preStop hook's, while the agent could still write); the sidecar was killed
        # (or failed) before its final flush reported. Its counts are not the final result.
        flush = None
        flushed = Cond(
            FLUSHED,
            "False",
            FLUSH_NOT_REPORTED,
            f"memsync-sync ended with exit code {sync.exit_code} before its final flush reported (the "
            "report it left is an earlier flush's); edits made since then may be lost",
        )
    elif flush is not None:
        if flush.complete:
            flushed = Cond(FLUSHED, "True", "FlushComplete", _flush_summary(flush))
        else:
            flushed = Cond(FLUSHED, "False", FLUSH_INCOMPLETE, _flush_summary(flush))
    elif not ever_mounted:
        flushed = Cond(FLUSHED, "True", "NothingToFlush", "the stores were never mounted: nothing to flush")
    else:
        flushed = Cond(
            FLUSHED,
            "False",
            FLUSH_NOT_REPORTED,
            "memsync-sync did not report a final flush; edits made since its last sync may be lost",
        )

    # Why the session ended, most specific first.
    if mounted.reason == MOUNT_FAILED:
        reason, text = MOUNT_FAILED, mounted.message
    elif not ever_mounted and not sandbox_ended:
        if pod_gone and not pod_ended:
            reason, text = POD_LOST, f"the sandbox Pod {view.name} disappeared before the stores were mounted"
        else:
            why = view.message or view.reason or "it ended before the stores were mounted"
            reason, text = POD_FAILED, f"the sandbox Pod {view.name} failed: {why}"
    elif view.reason == DEADLINE_EXCEEDED:
        why = f" ({view.message})" if view.message else ""
        reason = DEADLINE_EXCEEDED
        text = f"the sandbox Pod {view.name} reached its activeDeadlineSeconds and was stopped{why}"
        text = f"{text}; {flushed.message}" if flushed.status == "True" else text
    elif view.disruption is not None:
        reason = INTERRUPTED
        text = f"the sandbox Pod {view.name} was interrupted ({view.disruption})"
        text = f"{text}; {flushed.message}" if flushed.status == "True" else text
    elif _killed_at_deadline(view):
        reason = SANDBOX_KILLED
        text = (
            "the sandbox container ignored SIGTERM and was killed at the end of the grace period (exit "
            f"code {SIGKILL_EXIT_CODE}); memsync-sync got its SIGTERM only then, with about 2 s left for its "
            "final sync and flush. The sandbox's PID 1 must handle SIGTERM: a PID 1 without a handler never "
            "sees it (run the agent under tini, or install a handler; exec alone installs none)"
        )
    elif sandbox_ended and sandbox.exit_code not in (0, None) and not view.deleting:
        why = f" ({sandbox.reason})" if sandbox.reason else ""
        reason, text = SANDBOX_FAILED, f"the sandbox container exited with code {sandbox.exit_code}{why}"
    elif not sandbox_ended and not pod_ended:
        # Gone while the sandbox still ran: force-deleted, or the node went away.
        reason = POD_LOST
        text = f"the sandbox Pod {view.name} disappeared before its containers reported an end"
    elif view.phase == "Failed" and not sandbox_ended:
        why = view.message or view.reason or "no reason given"
        reason, text = POD_FAILED, f"the sandbox Pod {view.name} failed: {why}"
    elif flushed.status != "True":
        reason, text = flushed.reason, flushed.message
    else:
        reason, text = SESSION_SUCCEEDED, f"the session ended; {flushed.message}"

    synced = None
    if flush is not None:
        synced = (
            Cond(SYNCED, "True", "FinalFlushComplete", flushed.message)
            if flush.complete
            else Cond(SYNCED, "False", FLUSH_INCOMPLETE, flushed.message)
        )
    if reason == SESSION_SUCCEEDED:
        phase = SUCCEEDED
    else:
        phase = FAILED
        if flushed.status != "True" and flushed.reason != reason:
            text = f"{text}; {flushed.message}"
    ready = Cond(READY, "False", reason, text)
    mount_report = None
    report = parse_termination_message(view.mount.message) if view.mount.state == "terminated" else None
    if isinstance(report, MountReport):
        mount_report = report
    return Outcome(phase, ready, mounted, flushed, text, mount_report, flush, synced=synced)


def _parse_time(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def sidecar_start_overdue(pod: Mapping[str, Any], now: datetime, timeout_s: float) -> str | None:
    """Why the session must be failed now, or None: the mount ended well, yet ``timeout_s`` later
    memsync-sync has still not started (its startupProbe never passed; a kubelet with the native-sidecar
    startup defect never probes it again), so the sandbox would never run."""
    view = pod_view(pod)
    mount, sync = view.mount, view.sync
    if view.deleting or sync.started or view.sandbox.state in ("running", "terminated"):
        return None
    if mount.state != "terminated" or mount.exit_code != 0:
        return None
    finished = _parse_time(mount.finished_at)
    if finished is None or (now - finished).total_seconds() < timeout_s:
        return None
    detail = sync.state + (f": {sync.reason}" if sync.reason else "")
    return (
        f"memsync-sync had not started {timeout_s:.0f} s after the stores were mounted (its startupProbe on "
        f"/readyz never passed; the container is {detail}); the session was failed and its Pod deleted"
    )


def pod_outcome(pod: Mapping[str, Any], *, pod_gone: bool = False) -> Outcome:
    """What a Pod's statuses mean for the session, without regard to the previous status."""
    view = pod_view(pod)
    outcome = _pod_outcome(view, pod_gone=pod_gone)
    if outcome.flush_report is not None and view.sync.finished_at:
        return dataclasses.replace(outcome, last_sync=view.sync.finished_at)
    if outcome.mounted.status == "True" and view.mount.finished_at:
        return dataclasses.replace(outcome, last_sync=view.mount.finished_at)
    return outcome


def _pod_outcome(view: PodView, *, pod_gone: bool) -> Outcome:
    mounted, report = _mounted_cond(view)
    mount_report = report if isinstance(report, MountReport) else None
    terminal = _terminal_outcome(view, mounted, pod_gone)
    if terminal is not None:
        return terminal
    if mounted.reason == MOUNT_FAILED:
        # memsync-mount failed but the kubelet has not marked the Pod Failed yet: it will not get better.
        flushed = Cond(FLUSHED, "True", "NothingToFlush", "the stores were never mounted: nothing to flush")
        return Outcome(
            FAILED, Cond(READY, "False", MOUNT_FAILED, mounted.message), mounted, flushed, mounted.message
        )

    not_yet = Cond(FLUSHED, "Unknown", "SessionActive", "the final flush runs when the sandbox Pod ends")
    sandbox, sync = view.sandbox, view.sync
    if view.deleting or sandbox.state == "terminated":
        why = "the sandbox Pod is terminating" if view.deleting else "the sandbox container has ended"
        text = f"{why}; memsync-sync is flushing the stores"
        flushing = Cond(FLUSHED, "Unknown", "Flushing", "memsync-sync is running the final sync and flush")
        return Outcome(
            FLUSHING, Cond(READY, "False", "Flushing", text), mounted, flushing, text, mount_report
        )
    if sandbox.state == "running":
        if sync.ready:
            text = "the sandbox runs; memsync-sync keeps the stores in sync"
            return Outcome(
                RUNNING, Cond(READY, "True", "SessionRunning", text), mounted, not_yet, text, mount_report
            )
        text = "the sandbox runs but memsync-sync is not ready"
        return Outcome(
            MOUNTING, Cond(READY, "False", "SyncNotReady", text), mounted, not_yet, text, mount_report
        )
    if mounted.status == "True" or view.mount.state == "running":
        text = mounted.message
        if mounted.status == "True":
            text = "waiting for memsync-sync to become ready and the sandbox container to start"
            stuck = [
                f"{name} is waiting: {_waiting(c)}"
                for name, c in (("memsync-sync", sync), ("sandbox", sandbox))
                if _waiting(c)
            ]
            if stuck:
                text = "; ".join(stuck)
        return Outcome(MOUNTING, Cond(READY, "False", "Mounting", text), mounted, not_yet, text, mount_report)
    text = f"the sandbox Pod {view.name} is pending: {mounted.message}"
    return Outcome(PENDING, Cond(READY, "False", "PodPending", text), mounted, not_yet, text)


def _store_entries(
    stores: Mapping[str, str | None],
    previous: Any,
    mount_report: MountReport | None,
    flush_report: FlushReport | None,
) -> list[dict[str, Any]]:
    """Per-store results in the spec's order; values already reported are kept when a report is absent.

    ``stores`` maps each memoryStoreId of the spec to its effective mount path. A store a report names
    that the spec does not (it cannot happen with a Pod built from this spec) is listed after them.
    """
    before: dict[str, dict[str, Any]] = {}
    for item in previous if isinstance(previous, list) else []:
        if isinstance(item, dict) and isinstance(item.get("memoryStoreId"), str):
            before[item["memoryStoreId"]] = item
    ids = list(stores)
    for extra in (mount_report.memories if mount_report else {}, flush_report.stores if flush_report else {}):
        ids.extend(sid for sid in extra if sid not in ids)
    result: list[dict[str, Any]] = []
    for sid in ids:
        entry = dict(before.get(sid, {}))
        entry["memoryStoreId"] = sid
        mount_path = stores.get(sid)
        if mount_path:
            entry["mountPath"] = mount_path
        if mount_report is not None and sid in mount_report.memories:
            entry["memoriesMounted"] = mount_report.memories[sid]
        if flush_report is not None and sid in flush_report.stores:
            final = flush_report.stores[sid]
            shown = final.copy()
            totals = flush_report.totals.get(sid)
            if totals is not None:  # the session's running totals, where the report carries them
                for name in CUMULATIVE:
                    setattr(shown, name, getattr(totals, name))
            _put_counts(entry, shown, unsent=True)
        result.append(entry)
    return result


# status.stores[] key (camelCase) -> StoreCounts field: the report's base counts always, the others when set
_STORE_COUNT_KEYS: Final = tuple((to_camel(f.name), f.name) for f in dataclasses.fields(StoreCounts))


def _put_counts(entry: dict[str, Any], counts: StoreCounts, *, unsent: bool) -> None:
    """Write ``counts`` into a status.stores entry (``unsent`` only from a flush report)."""
    for key, name in _STORE_COUNT_KEYS:
        if name in FINAL_ONLY and not unsent:
            continue
        value = getattr(counts, name)
        if value or name in BASE_COUNTS:
            entry[key] = list(value) if isinstance(value, list) else value
        else:
            entry.pop(key, None)


def counts_of(entry: Mapping[str, Any]) -> StoreCounts:
    """The counts a ``status.stores`` entry holds, read back (what is absent or malformed reads as 0)."""
    return StoreCounts(**{name: entry[key] for key, name in _STORE_COUNT_KEYS if key in entry})


def _assemble(
    previous: Mapping[str, Any],
    outcome: Outcome,
    *,
    pod_name: str | None,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
) -> Status:
    status: Status = {k: v for k, v in previous.items() if k != "kopf"}
    status["phase"] = outcome.phase
    status["message"] = outcome.message[:MESSAGE_LIMIT]
    if pod_name is not None:
        status["podName"] = pod_name
    else:
        status.pop("podName", None)
    if generation is not None:
        status["observedGeneration"] = generation
    status["conditions"] = merge_conditions(
        previous.get("conditions"),
        [outcome.ready, outcome.mounted, outcome.flushed],
        generation=generation,
        now=now,
    )
    status["stores"] = _store_entries(
        stores, previous.get("stores"), outcome.mount_report, outcome.flush_report
    )
    # the "Stores" column of kubectl get (printer columns cannot count); without spec.stores, the stores the
    # Pod reported (resolved from the session at mount)
    status["storeCount"] = len(stores) or len(status["stores"])
    if outcome.synced is not None:
        status["conditions"] = merge_conditions(
            status["conditions"], [outcome.synced], generation=generation, now=now
        )
        status["conditions"].sort(key=_condition_order)
    _advance_last_sync(status, outcome.last_sync)
    return status


def _condition_order(entry: Mapping[str, Any]) -> int:
    kind = entry.get("type")
    return CONDITION_TYPES.index(kind) if kind in CONDITION_TYPES else len(CONDITION_TYPES)


def _advance_last_sync(status: Status, when: str | None) -> None:
    """``lastSyncTime`` only ever moves forward (RFC 3339 UTC strings of one format sort by time)."""
    before = status.get("lastSyncTime")
    if when is not None and (not isinstance(before, str) or when > before):
        status["lastSyncTime"] = when


# --------------------------------------------------------------------------------------------------
# Live sync health, from the sidecar's /status document
# --------------------------------------------------------------------------------------------------


_FAILING_PART_SEPARATOR: Final = "; "


def synced_condition(health: SyncHealth | None, error: str | None = None) -> Cond:
    """The ``Synced`` condition from the sidecar's health document (None: it could not be read, ``error``
    says why). False while any store's last pass failed, naming each failing store and its last error."""
    if health is None:
        return Cond(SYNCED, "Unknown", STATUS_UNAVAILABLE, f"cannot read the sidecar's sync status: {error}")
    failing = {sid: h for sid, h in health.stores.items() if not h.healthy}
    if failing:
        parts = [
            f"{sid}: {_plural(h.failing_passes, 'failed pass', 'failed passes')}"
            + (f", last error: {h.last_error}" if h.last_error else "")
            for sid, h in sorted(failing.items())
        ]
        return Cond(SYNCED, "False", SYNC_FAILING, _FAILING_PART_SEPARATOR.join(parts))
    if not health.stores or any(h.outcome == "pending" for h in health.stores.values()):
        return Cond(SYNCED, "Unknown", FIRST_SYNC_PENDING, "the first sync of every store has not finished")
    return Cond(SYNCED, "True", IN_SYNC, f"every store synced ({_plural(len(health.stores), 'store')})")


def named_as_failing(synced: Mapping[str, Any], store_id: str) -> bool:
    """True when a ``Synced`` condition (as written by ``synced_condition``) says ``store_id`` is failing."""
    if synced.get("status") != "False" or synced.get("reason") != SYNC_FAILING:
        return False
    message = str(synced.get("message") or "")
    head = f"{store_id}: "
    return message.startswith(head) or f"{_FAILING_PART_SEPARATOR}{head}" in message


def health_status(
    previous: Mapping[str, Any],
    health: SyncHealth | None,
    *,
    error: str | None = None,
    generation: int | None,
    now: datetime,
) -> Status | None:
    """The status with the live sync health applied: the ``Synced`` condition, ``lastSyncTime`` (the oldest
    store's last clean sync) and each store's running totals. None when the session is over (its final
    report decides) or nothing is known yet."""
    if previous.get("phase") in TERMINAL_PHASES or not previous.get("podName"):
        return None
    status: Status = {k: v for k, v in previous.items() if k != "kopf"}
    conditions = merge_conditions(
        previous.get("conditions"), [synced_condition(health, error)], generation=generation, now=now
    )
    status["conditions"] = sorted(conditions, key=_condition_order)
    if health is None:
        return status
    successes = [h.last_success for h in health.stores.values()]
    if successes and all(successes):
        _advance_last_sync(status, min(s for s in successes if s))
    entries = [dict(e) for e in previous.get("stores") or [] if isinstance(e, dict)]
    for entry in entries:
        store = health.stores.get(str(entry.get("memoryStoreId")))
        if store is not None:
            _put_counts(entry, store.totals, unsent=False)
    status["stores"] = entries
    return status


def is_refusal(status: Mapping[str, Any]) -> bool:
    """True when the status is a Failed refusal that happened before any Pod was created."""
    ready = condition(status, READY)
    return status.get("phase") == FAILED and ready is not None and ready.get("reason") in REFUSAL_REASONS


def derive_status(
    previous: Mapping[str, Any] | None,
    pod: Mapping[str, Any],
    *,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
    pod_gone: bool = False,
) -> Status:
    """The new status of a SessionMemory from its Pod (``pod_gone``: the Pod's last state, now deleted).

    - Non-terminal phases never move backwards (a sidecar that turns unready does not undo Running).
    - An outcome derived from this Pod (Succeeded/Failed) is final: later events can add a flush report
      that arrives late, but never reopen the session. An outcome the operator decided
      (``OPERATOR_VERDICTS``) is not replaced at all.
    - A refusal (Failed before any Pod) is replaced by what the Pod says.
    """
    prev: Mapping[str, Any] = previous or {}
    outcome = pod_outcome(pod, pod_gone=pod_gone)
    pod_name = pod_view(pod).name or (prev.get("podName") if isinstance(prev.get("podName"), str) else None)
    prev_phase = prev.get("phase")
    if prev_phase in TERMINAL_PHASES and not is_refusal(prev) and prev.get("podName") == pod_name:
        if (
            outcome.phase not in TERMINAL_PHASES
            or (condition(prev, READY) or {}).get("reason") in OPERATOR_VERDICTS
        ):
            return dict(prev)
    elif prev_phase in _RANK and outcome.phase in _RANK and _RANK[outcome.phase] < _RANK[str(prev_phase)]:
        # Keep the phase that was reached; the conditions still say what is true now.
        outcome = dataclasses.replace(outcome, phase=str(prev_phase))
    return _assemble(prev, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now)


def refusal_status(
    previous: Mapping[str, Any] | None,
    *,
    reason: str,
    message: str,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
) -> Status:
    """Failed before any Pod: the Ready condition names the problem; nothing was mounted or is at risk."""
    prev = previous or {}
    outcome = Outcome(
        FAILED,
        Cond(READY, "False", reason, message),
        Cond(STORES_MOUNTED, "False", "NotStarted", "no sandbox Pod was started"),
        Cond(FLUSHED, "True", "NothingToFlush", "no sandbox Pod was started: nothing to flush"),
        message,
    )
    return _assemble(prev, outcome, pod_name=None, stores=stores, generation=generation, now=now)


def lost_pod_status(
    previous: Mapping[str, Any] | None,
    *,
    pod_name: str,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
    reason: str = POD_LOST,
    why: str | None = None,
    never_ran: bool = False,
) -> Status:
    """The Pod this SessionMemory had is gone (or was given up on) and its last state was never seen.

    A session runs once: the operator does not start a second Pod. If an outcome was already recorded
    it stands; otherwise the session is Failed (``reason``, default PodLost; ``why`` replaces the default
    explanation), and the final flush is unconfirmed unless the stores were never mounted or the sandbox
    ``never_ran``.
    """
    prev = previous or {}
    if prev.get("phase") in TERMINAL_PHASES and not is_refusal(prev):
        return dict(prev)
    before = condition(prev, STORES_MOUNTED)
    if before is not None and before.get("status") == "True":
        mounted = Cond(
            STORES_MOUNTED, "True", str(before.get("reason") or "Mounted"), str(before.get("message") or "")
        )
    else:
        mounted = Cond(STORES_MOUNTED, "False", "NotMounted", "the stores were never mounted")
    if never_ran:
        flushed = Cond(FLUSHED, "True", "NothingToFlush", "the sandbox never ran: nothing was edited")
    elif mounted.status == "True":
        flushed = Cond(
            FLUSHED,
            "False",
            FLUSH_NOT_REPORTED,
            "memsync-sync did not report a final flush; edits made since its last sync may be lost",
        )
    else:
        flushed = Cond(FLUSHED, "True", "NothingToFlush", "the stores were never mounted: nothing to flush")
    text = why or f"the sandbox Pod {pod_name} disappeared before its containers reported an end"
    if flushed.status != "True":
        text = f"{text}; {flushed.message}"
    outcome = Outcome(FAILED, Cond(READY, "False", reason, text), mounted, flushed, text)
    return _assemble(prev, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now)


def with_generation(previous: Mapping[str, Any] | None, generation: int | None) -> Status:
    """The same status, now marked as computed from ``generation`` (conditions included)."""
    status: Status = dict(previous or {})
    if generation is None:
        return status
    status["observedGeneration"] = generation
    conds = status.get("conditions")
    if isinstance(conds, list):
        status["conditions"] = [
            {**c, "observedGeneration": generation}
            if isinstance(c, dict) and c.get("type") in CONDITION_TYPES
            else c
            for c in conds
        ]
    return status


def status_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Status:
    """A JSON merge patch turning ``old`` into ``new`` at the top level (dropped keys become None)."""
    old = old or {}
    patch: Status = {k: v for k, v in new.items() if old.get(k) != v}
    for key in old:
        if key not in new and key != "kopf":
            patch[key] = None
    return patch


def now_utc() -> datetime:
    """The one impure helper: handlers pass its value into the functions above."""
    return datetime.now(tz=UTC)
