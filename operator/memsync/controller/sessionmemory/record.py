"""What a step records in a SessionMemory's status: a refusal, its Pod's state, a gone Pod, a lost Pod, a
wait without a Pod, a start that timed out, a lost node.

Each builds the pure ``compute`` of one status write (``writer.write_status``) from ``derive.py``,
``waiting.py`` and ``interruption.py``. An interrupted Pod's end becomes a restart (``Restarting``) when the
spec asks for one and restarts are left (``interruption.may_restart``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memsync.controller.conditions import condition
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory import derive, interruption, waiting
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status
from memsync.controller.sessionmemory.digest import StorePaths
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.sessionmemory.writer import generation_of, write_status


async def refuse(
    state: SessionMemories,
    namespace: str,
    name: str,
    reason: str,
    message: str,
    *,
    stores: StorePaths | None = None,
) -> None:
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if previous.get("podName") and not ph.is_refusal(previous):
            return None  # a Pod was started meanwhile: the Pod's story wins
        return derive.refusal_status(
            previous,
            reason=reason,
            message=message,
            stores=state.store_paths(obj, stores),
            generation=generation_of(obj),
            now=now,
        )

    await write_status(state, namespace, name, compute)


async def record_pod(
    state: SessionMemories,
    ref: ObjectRef,
    pod: Mapping[str, Any],
    *,
    pod_gone: bool = False,
    stores: StorePaths | None = None,
) -> Status | None:
    """Derive the status of SessionMemory ``ref`` from ``pod`` (``pod_gone``: its last state) and write it."""
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != ref.uid:
            return None  # a newer SessionMemory of the same name; this Pod is not its own
        new = derive.derive_status(
            previous,
            pod,
            stores=state.store_paths(obj, stores),
            generation=generation_of(obj),
            now=now,
            pod_gone=pod_gone,
        )
        if (
            new.get("phase") == ph.FAILED
            and previous.get("phase") not in ph.TERMINAL_PHASES
            and interruption.interrupted(pod)
            and interruption.may_restart(obj.get("spec") or {}, previous)
        ):
            why = str((condition(new, ph.READY) or {}).get("message") or "the sandbox Pod was interrupted")
            return interruption.restarting_status(
                new, why=why, waits_for=None, generation=generation_of(obj), now=now
            )
        return new

    return await write_status(state, ref.namespace, ref.name, compute, uid=ref.uid)


async def record_gone_pod(
    state: SessionMemories,
    ref: ObjectRef,
    pod_name: str,
    *,
    stores: StorePaths | None = None,
) -> None:
    """Pod ``pod_name`` is gone: judge it by the last state the watcher saw, else as lost."""
    seen = state.seen_pod(ref.namespace, ref.name, ref.uid, pod_name)
    if seen is not None:
        await record_pod(state, ref, seen.pod, pod_gone=True, stores=stores)
    else:
        await record_lost_pod(state, ref, pod_name, stores=stores)


async def record_lost_pod(
    state: SessionMemories,
    ref: ObjectRef,
    pod_name: str,
    *,
    reason: str = ph.POD_LOST,
    why: str | None = None,
    never_ran: bool = False,
    stores: StorePaths | None = None,
) -> None:
    """The Pod is gone (or given up on, ``reason``) and its last state was never seen: fail the session."""
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != ref.uid:
            return None
        return derive.lost_pod_status(
            previous,
            pod_name=pod_name,
            stores=state.store_paths(obj, stores),
            generation=generation_of(obj),
            now=now,
            reason=reason,
            why=why,
            never_ran=never_ran,
        )

    await write_status(state, ref.namespace, ref.name, compute, uid=ref.uid)


async def record_waiting(
    state: SessionMemories, ref: ObjectRef, reason: str, message: str, *, stores: StorePaths | None = None
) -> Status | None:
    """The session waits without a Pod of its own (``reason``: one of ``phases.WAITING_REASONS``)."""
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != ref.uid:
            return None
        return waiting.waiting_status(
            previous,
            reason,
            message,
            stores=state.store_paths(obj, stores),
            generation=generation_of(obj),
            now=now,
        )

    return await write_status(state, ref.namespace, ref.name, compute, uid=ref.uid)


async def record_start_timeout(
    state: SessionMemories,
    ref: ObjectRef,
    message: str,
    *,
    pod_name: str | None,
    stores: StorePaths | None = None,
) -> None:
    """The sandbox did not start in time: ``StartTimeout`` (an outcome already recorded stands)."""
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != ref.uid or (
            previous.get("phase") in ph.TERMINAL_PHASES and not ph.is_refusal(previous)
        ):
            return None
        return waiting.start_timeout_status(
            previous,
            message,
            pod_name=pod_name,
            stores=state.store_paths(obj, stores),
            generation=generation_of(obj),
            now=now,
        )

    await write_status(state, ref.namespace, ref.name, compute, uid=ref.uid)


async def record_node_lost(
    state: SessionMemories,
    ref: ObjectRef,
    pod_name: str,
    lost: interruption.LostNode,
    *,
    stores: StorePaths | None = None,
) -> Status | None:
    """The Pod's node is lost: ``NodeLost``, or a restart that waits for the Pod to be gone."""
    now = state.clock()

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        if meta_of(obj).uid != ref.uid or previous.get("podName") not in (None, pod_name):
            return None
        if previous.get("phase") in ph.TERMINAL_PHASES or ph.is_waiting(previous):
            return previous
        new = interruption.node_lost_status(
            previous,
            lost,
            pod_name=pod_name,
            stores=state.store_paths(obj, stores),
            generation=generation_of(obj),
            now=now,
        )
        if not interruption.may_restart(obj.get("spec") or {}, previous):
            return new
        why = str((condition(new, ph.READY) or {}).get("message") or lost.why)
        return interruption.restarting_status(
            new,
            why=why,
            waits_for=f"sandbox Pod {pod_name} is gone (deleted with the node, or force-deleted)",
            generation=generation_of(obj),
            now=now,
        )

    return await write_status(state, ref.namespace, ref.name, compute, uid=ref.uid)
