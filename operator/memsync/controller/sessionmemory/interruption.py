"""Interruptions of a session, as pure decisions: a node that was lost under its Pod, and a new Pod after an
interruption (``spec.onInterruption: Restart``).

A lost node (``node_lost``): the Pod's Node object is gone, carries the ``node.kubernetes.io/out-of-service``
taint, or its ``Ready`` condition has not been True for the operator's grace. The Pod cannot end there, so
no final flush will be reported: the session gets ``NodeLost`` with when the stores were last synced and
what the final flush could not do (``node_lost_status``). With ``--force-delete-lost-pods`` the Pod is
force-deleted once it had its own grace period on top of that (``force_delete_due``), so a name, a
namespace's deletion or a restart waiting for it can go on.

A restart (``restarting_status``): a session interrupted (a drain, an eviction, a preemption, a lost node)
whose spec asks for it, and which has restarts left (``MAX_RESTARTS``), goes back to ``Pending`` with reason
``Restarting``, ``status.restarts`` one higher and ``lastRestartTime`` now; the operator then starts the
attempt's Pod (``pod.pod_name_for(name, restarts)``) once the interrupted one has ended: after its final
flush, or, for a lost node, once it is gone (what the periodic sync had sent is in the store).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, cast

from memsync.contracts.report import MESSAGE_LIMIT
from memsync.controller.conditions import Cond, condition, format_time, merge_conditions
from memsync.controller.sessionmemory import derive
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status
from memsync.controller.sessionmemory.outcome import Outcome
from memsync.controller.sessionmemory.podview import pod_view
from memsync.crd.models import MAX_RESTARTS

OUT_OF_SERVICE_TAINT: Final = "node.kubernetes.io/out-of-service"
RESTART: Final = "Restart"


@dataclass(frozen=True)
class LostNode:
    """Why the Pod's node counts as lost, and since when (None: at once, nothing can come back)."""

    node: str
    why: str
    since: datetime | None


def _time(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def node_lost(name: str, node: Mapping[str, Any] | None, now: datetime, grace_s: float) -> LostNode | None:
    """The verdict on node ``name`` (``node``: the Node as the API serves it, None when it does not exist):
    lost when it is gone, tainted out-of-service, or not Ready for ``grace_s`` seconds; else None."""
    if node is None:
        return LostNode(name, f"node {name} no longer exists", None)
    spec = node.get("spec") or {}
    for taint in spec.get("taints") or [] if isinstance(spec, Mapping) else []:
        if isinstance(taint, Mapping) and taint.get("key") == OUT_OF_SERVICE_TAINT:
            return LostNode(name, f"node {name} is tainted {OUT_OF_SERVICE_TAINT}", None)
    ready = condition(node.get("status") or {}, "Ready")
    if ready is None or ready.get("status") == "True":
        return None
    since = _time(ready.get("lastTransitionTime"))
    if since is None or now - since < timedelta(seconds=grace_s):
        return None
    state = "NotReady" if ready.get("status") == "False" else "not answering (Ready Unknown)"
    detail = ": ".join(str(p) for p in (ready.get("reason"), ready.get("message")) if p)
    why = f"node {name} has been {state} since {format_time(since)}"
    return LostNode(name, f"{why} ({detail})" if detail else why, since)


def force_delete_due(lost: LostNode, now: datetime, grace_s: float, pod_grace_s: float) -> bool:
    """Whether a Pod on ``lost`` may be force-deleted now: at once for a node that cannot come back (gone,
    out-of-service), else once it had its own grace period after the node was judged lost."""
    if lost.since is None:
        return True
    return now - lost.since >= timedelta(seconds=grace_s + pod_grace_s)


def may_restart(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether an interrupted session starts a new Pod: its spec asks for it and it has restarts left."""
    restarts = status.get("restarts")
    done = restarts if isinstance(restarts, int) else 0
    return spec.get("onInterruption") == RESTART and done < MAX_RESTARTS


def interrupted(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod was disrupted (evicted, drained, preempted, stopped by a node shutdown)."""
    return pod_view(pod).disruption is not None


def node_lost_status(
    previous: Mapping[str, Any],
    lost: LostNode,
    *,
    pod_name: str,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
) -> Status:
    """``NodeLost``: Failed, with when the stores were last synced and what the final flush could not do.
    An outcome already recorded stands."""
    if previous.get("phase") in ph.TERMINAL_PHASES and not ph.is_refusal(previous):
        return cast(Status, dict(previous))
    mounted_before = condition(previous, ph.STORES_MOUNTED) or {}
    last_sync = previous.get("lastSyncTime")
    synced = (
        f"the stores' last complete sync on record was at {last_sync}"
        if last_sync
        else "no complete sync of the stores is on record"
    )
    if mounted_before.get("status") == "True":
        mounted = Cond(
            ph.STORES_MOUNTED,
            "True",
            str(mounted_before.get("reason") or "Mounted"),
            str(mounted_before.get("message") or ""),
        )
        flushed = Cond(
            ph.FLUSHED,
            "False",
            ph.FLUSH_NOT_REPORTED,
            f"the final flush could not run on lost node {lost.node}: edits made since the last sync stay on "
            "that node and are not in the store (everything the periodic sync had sent is)",
        )
    else:
        mounted = Cond(ph.STORES_MOUNTED, "False", "NotMounted", "the stores were never mounted")
        flushed = Cond(
            ph.FLUSHED, "True", "NothingToFlush", "the stores were never mounted: nothing to flush"
        )
    text = f"{lost.why}: the sandbox Pod {pod_name} cannot end there; {synced}"
    if flushed.status != "True":
        text = f"{text}; {flushed.message}"
    outcome = Outcome(ph.FAILED, Cond(ph.READY, "False", ph.NODE_LOST, text), mounted, flushed, text)
    return derive.assemble(
        previous, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now
    )


def restarting_status(
    ended: Mapping[str, Any], *, why: str, waits_for: str | None, generation: int | None, now: datetime
) -> Status:
    """The session goes back to Pending for a new Pod. ``ended``: its status as the interrupted Pod left it
    (Failed: its final flush's result and counts stay), ``why`` what interrupted it, ``waits_for`` what the
    new Pod waits for (None: nothing, it starts now)."""
    restarts = ended.get("restarts")
    attempt = (restarts if isinstance(restarts, int) else 0) + 1
    flushed = condition(ended, ph.FLUSHED) or {}
    text = f"{why}; restart {attempt} of {MAX_RESTARTS}: a new sandbox Pod mounts the stores again"
    if waits_for:
        text = f"{text} once {waits_for}"
    if flushed.get("message") and str(flushed.get("message")) not in text:
        text = f"{text} (the interrupted Pod: {flushed['message']})"
    status = cast(Status, {k: v for k, v in ended.items() if k != "kopf"})
    status["phase"] = ph.PENDING
    status["restarts"] = attempt
    status["lastRestartTime"] = format_time(now)
    status["message"] = text[:MESSAGE_LIMIT]
    status["conditions"] = merge_conditions(
        ended.get("conditions"),
        [Cond(ph.READY, "False", ph.RESTARTING, text)],
        generation=generation,
        now=now,
    )
    status["conditions"].sort(key=derive.condition_order)
    return status
