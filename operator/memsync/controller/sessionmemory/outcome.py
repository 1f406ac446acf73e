"""What a sandbox Pod's state means for its session (an ``Outcome``), before it becomes status fields.

Pure: a Pod (``podview.PodView``) in, an outcome out. The sync agent reports through termination messages
(one line of JSON, see the agent's contract): ``{"phase":"mounted",...}`` from ``memsync-mount``,
``{"phase":"mount_failed",...}`` when it fails, and ``{"phase":"flushed",...}`` from ``memsync-sync`` at
shutdown. A missing, truncated or malformed message never breaks the derivation: it is reported as "not
reported". So is a complete report left by a sidecar that did not exit 0: the preStop ``memsync flush``
writes the termination log too, so that report is an earlier flush's whenever the final one was killed
before it could report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from memsync.contracts.report import FlushReport, MountFailure, MountReport, StoreCounts, parse_report
from memsync.controller.conditions import Cond
from memsync.controller.sessionmemory.phases import (
    DEADLINE_EXCEEDED,
    FAILED,
    FLUSH_INCOMPLETE,
    FLUSH_NOT_REPORTED,
    FLUSHED,
    FLUSHING,
    INTERRUPTED,
    MOUNT_FAILED,
    MOUNTING,
    PENDING,
    POD_FAILED,
    POD_LOST,
    READY,
    RUNNING,
    SANDBOX_FAILED,
    SANDBOX_KILLED,
    SCHEDULED,
    SESSION_SUCCEEDED,
    STORES_MOUNTED,
    SUCCEEDED,
    SYNCED,
)
from memsync.controller.sessionmemory.podview import PodView, pod_view, waiting_reason
from memsync.crd.status_types import ConditionStatus

#: The agent's report in a termination message (``memsync.contracts.report``), parsed leniently there.
parse_termination_message = parse_report


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
    scheduled: Cond | None = None  # the Pod's PodScheduled condition, mirrored


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


def _mounted_cond(view: PodView) -> tuple[Cond, MountReport | MountFailure | None]:
    mount = view.mount
    if mount.state == "terminated":
        report = parse_termination_message(mount.message)
        if mount.exit_code == 0:
            if isinstance(report, MountReport):
                total = sum(report.memories.values())
                text = (
                    f"memsync-mount materialised {plural(total, 'memory', 'memories')} "
                    f"from {plural(len(report.memories), 'store')}"
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
    waiting = waiting_reason(mount)
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
        f"refused {totals.refused}, unsent {totals.unsent} across {plural(len(report.stores), 'store')}"
    )
    if totals.refused:
        refused = sorted({p for s in stores for p in s.refused_paths})
        sample = f" ({', '.join('/' + p for p in refused)})" if refused else ""
        text += f"; {plural(totals.refused, 'refused file')} never reached the store{sample}"
    if totals.unreadable:
        text += f"; {plural(totals.unreadable, 'file')} could not be read"
    if totals.held_deletes:
        held = sorted({p for s in stores for p in s.held_delete_paths})
        text += (
            f"; {plural(totals.held_deletes, 'local deletion')} held back by the delete cap stay in the "
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
    sync = view.sync
    pod_ended = view.phase in ("Succeeded", "Failed")
    if not (pod_ended or pod_gone or (view.sandbox.state == "terminated" and sync.state == "terminated")):
        return None
    flushed, flush = _final_flush(view, ever_mounted=mounted.status == "True")
    reason, text = _why_ended(view, mounted, flushed, pod_gone=pod_gone)
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


def _final_flush(view: PodView, *, ever_mounted: bool) -> tuple[Cond, FlushReport | None]:
    """The ``Flushed`` condition of an ended Pod, and the final flush's report when it is the final one."""
    sync = view.sync
    flush_report = parse_termination_message(sync.message) if sync.state == "terminated" else None
    flush = flush_report if isinstance(flush_report, FlushReport) else None
    if flush is not None and flush.complete and sync.exit_code not in (0, None):
        # A complete final flush exits 0. A complete report with another exit code was written by an
        # earlier flush (the preStop hook's, while the agent could still write); the sidecar was killed
        # (or failed) before its final flush reported. Its counts are not the final result.
        return Cond(
            FLUSHED,
            "False",
            FLUSH_NOT_REPORTED,
            f"memsync-sync ended with exit code {sync.exit_code} before its final flush reported (the "
            "report it left is an earlier flush's); edits made since then may be lost",
        ), None
    if flush is not None:
        if flush.complete:
            return Cond(FLUSHED, "True", "FlushComplete", _flush_summary(flush)), flush
        return Cond(FLUSHED, "False", FLUSH_INCOMPLETE, _flush_summary(flush)), flush
    if not ever_mounted:
        return Cond(
            FLUSHED, "True", "NothingToFlush", "the stores were never mounted: nothing to flush"
        ), None
    return Cond(
        FLUSHED,
        "False",
        FLUSH_NOT_REPORTED,
        "memsync-sync did not report a final flush; edits made since its last sync may be lost",
    ), None


def _why_ended(view: PodView, mounted: Cond, flushed: Cond, *, pod_gone: bool) -> tuple[str, str]:
    """(reason, message) of why the session ended, most specific first."""
    sandbox = view.sandbox
    pod_ended = view.phase in ("Succeeded", "Failed")
    sandbox_ended = sandbox.state == "terminated"
    if mounted.reason == MOUNT_FAILED:
        reason, text = MOUNT_FAILED, mounted.message
    elif mounted.status != "True" and not sandbox_ended:
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
    return reason, text


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


def scheduled_condition(view: PodView) -> Cond | None:
    """The ``Scheduled`` condition: the Pod's ``PodScheduled`` (reason and the scheduler's message) while
    it waits for a node, True with the node once bound; None before the scheduler said anything."""
    found = view.scheduled
    if found is None:
        return None
    if found.status == "True":
        where = f" on node {view.node}" if view.node else ""
        return Cond(SCHEDULED, "True", "Scheduled", f"the sandbox Pod {view.name} was scheduled{where}")
    status: ConditionStatus = "False" if found.status == "False" else "Unknown"
    reason = found.reason or "NotScheduled"
    return Cond(SCHEDULED, status, reason, found.message or f"the sandbox Pod {view.name} has no node yet")


def unscheduled(view: PodView) -> str | None:
    """Why the Pod waits for a node ("<reason>: <the scheduler's message>"), or None once it has one."""
    found = view.scheduled
    if found is None or found.status == "True" or view.node:
        return None
    return ": ".join(part for part in (found.reason or "NotScheduled", found.message) if part)


def pod_outcome(pod: Mapping[str, Any], *, pod_gone: bool = False) -> Outcome:
    """What a Pod's statuses mean for the session, without regard to the previous status."""
    view = pod_view(pod)
    outcome = dataclasses.replace(_pod_outcome(view, pod_gone=pod_gone), scheduled=scheduled_condition(view))
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
                f"{name} is waiting: {waiting_reason(c)}"
                for name, c in (("memsync-sync", sync), ("sandbox", sandbox))
                if waiting_reason(c)
            ]
            if stuck:
                text = "; ".join(stuck)
        return Outcome(MOUNTING, Cond(READY, "False", "Mounting", text), mounted, not_yet, text, mount_report)
    waiting_node = unscheduled(view)
    if waiting_node is not None:
        text = f"the sandbox Pod {view.name} waits for a node: {waiting_node}"
        return Outcome(PENDING, Cond(READY, "False", "PodUnschedulable", text), mounted, not_yet, text)
    text = f"the sandbox Pod {view.name} is pending: {mounted.message}"
    return Outcome(PENDING, Cond(READY, "False", "PodPending", text), mounted, not_yet, text)
