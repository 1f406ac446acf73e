"""A session that has not started yet, as pure decisions: what it waits for, and its start deadline.

From its creation (for a restart: from ``lastRestartTime``) a session has ``spec.startDeadlineSeconds``
(else the operator's ``--start-deadline``) until its sandbox container runs: scheduling, a quota wait, image
pulls and the mount all count. Past it the session fails with ``StartTimeout``, naming the last thing it
waited for (``start_overdue``); the operator deletes its Pod. Nothing ran, so nothing was edited.

Without a Pod of its own a session can wait (``waiting_status``: ``Pending`` with a reason of
``phases.WAITING_REASONS``): for a ResourceQuota or a LimitRange that refused its Pod (``QuotaExceeded``, the
API's message), for the Pod of an earlier SessionMemory of the same name to be gone
(``PreviousPodTerminating``), or, after an interruption, for the interrupted Pod to end (``Restarting``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from memsync.controller.conditions import Cond, condition
from memsync.controller.sessionmemory import derive
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status
from memsync.controller.sessionmemory.outcome import Outcome, unscheduled
from memsync.controller.sessionmemory.podview import PodView, pod_view, waiting_reason

#: Backoff of a session waiting without a Pod (a quota that may free up): 2, 4, 8 ... seconds, up to the
#: re-check interval.
BACKOFF_FIRST_S: Final = 2.0


def _time(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def start_deadline_seconds(spec: Mapping[str, Any], default: float) -> float:
    """The SessionMemory's ``spec.startDeadlineSeconds``, else the operator's default."""
    value = spec.get("startDeadlineSeconds")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else default


def deadline(created: str | None, status: Mapping[str, Any], seconds: float) -> datetime | None:
    """When the session (or its latest restart) must run its sandbox by; None when its start is unknown."""
    origin = _time(status.get("lastRestartTime")) or _time(created)
    return None if origin is None else origin + timedelta(seconds=seconds)


def sandbox_started(view: PodView) -> bool:
    return view.sandbox.state in ("running", "terminated")


def waited_for(view: PodView) -> str:
    """The last thing a Pod whose sandbox has not run yet was waiting for, as a person reads it."""
    node = unscheduled(view)
    if node is not None:
        return f"no node for the sandbox Pod ({node})"
    for name, container in (
        ("memsync-mount", view.mount),
        ("memsync-sync", view.sync),
        ("sandbox", view.sandbox),
    ):
        why = waiting_reason(container)
        if why is not None:
            return f"{name} waiting ({why})"
    if view.mount.state == "running":
        return "memsync-mount still downloading the stores"
    if view.mount.state == "terminated" and not view.sync.started:
        return "memsync-sync not started yet"
    return f"the sandbox Pod {view.name} to start (phase {view.phase})"


def start_overdue(
    pod: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    *,
    created: str | None,
    now: datetime,
    seconds: float,
) -> str | None:
    """The ``StartTimeout`` message when the start deadline has passed and the sandbox never ran, else None.
    ``pod``: the session's Pod of its current attempt, None when it has none (it waits: the status says
    for what)."""
    due = deadline(created, status, seconds)
    if due is None or now < due:
        return None
    if pod is not None:
        view = pod_view(pod)
        if sandbox_started(view) or view.deleting or view.phase in ("Succeeded", "Failed"):
            return None
        last = waited_for(view)
    else:
        last = str((condition(status, ph.READY) or {}).get("message") or "no sandbox Pod was created")
    return (
        f"the sandbox did not start within {seconds:.0f} s (spec.startDeadlineSeconds, else the operator's "
        f"--start-deadline); it was waiting for {last}"
    )


def start_timeout_status(
    previous: Mapping[str, Any],
    message: str,
    *,
    pod_name: str | None,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
) -> Status:
    """``StartTimeout``: Failed; the sandbox never ran, so nothing was edited (a restart keeps what the
    interrupted Pod's final flush reported)."""
    flushed_before = condition(previous, ph.FLUSHED) or {}
    if previous.get("restarts") and flushed_before.get("status") in ("True", "False"):
        flushed = Cond(
            ph.FLUSHED,
            flushed_before["status"],
            str(flushed_before.get("reason") or ph.FLUSH_NOT_REPORTED),
            str(flushed_before.get("message") or ""),
        )
    else:
        flushed = Cond(ph.FLUSHED, "True", "NothingToFlush", "the sandbox never ran: nothing was edited")
    mounted = Cond(ph.STORES_MOUNTED, "False", ph.START_TIMEOUT, "the session did not start in time")
    outcome = Outcome(
        ph.FAILED, Cond(ph.READY, "False", ph.START_TIMEOUT, message), mounted, flushed, message
    )
    return derive.assemble(
        previous, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now
    )


def waiting_status(
    previous: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
) -> Status:
    """Pending without a Pod of its own, waiting for ``reason`` (``phases.WAITING_REASONS``)."""
    if previous.get("phase") in ph.TERMINAL_PHASES and not ph.is_refusal(previous):
        return derive.with_generation(previous, generation)
    flushed_before = condition(previous, ph.FLUSHED) or {}
    if previous.get("restarts") and flushed_before:
        flushed = Cond(
            ph.FLUSHED,
            "True" if flushed_before.get("status") == "True" else "False",
            str(flushed_before.get("reason") or ph.FLUSH_NOT_REPORTED),
            str(flushed_before.get("message") or ""),
        )
    else:
        flushed = Cond(ph.FLUSHED, "True", "NothingToFlush", "no sandbox Pod has run: nothing to flush")
    mounted = Cond(ph.STORES_MOUNTED, "False", "NotStarted", "no sandbox Pod of this session runs")
    outcome = Outcome(ph.PENDING, Cond(ph.READY, "False", reason, message), mounted, flushed, message)
    pod_name = previous.get("podName") if isinstance(previous.get("podName"), str) else None
    return derive.assemble(
        previous, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now
    )


def backoff_seconds(attempt: int, cap: float) -> float:
    """The wait before retry ``attempt`` (1, 2, ...) of a waiting session: 2, 4, 8 ... up to ``cap``."""
    return float(min(cap, BACKOFF_FIRST_S * 2 ** max(0, attempt - 1)))
