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

How a Pod's state maps to an outcome is ``outcome.py``; this module turns outcomes (and the sidecar's
health) into the status fields, keeping what must not move backwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, cast

from pydantic.alias_generators import to_camel

from memsync.contracts.health import SyncHealth
from memsync.contracts.report import (
    BASE_COUNTS,
    CUMULATIVE,
    FINAL_ONLY,
    MESSAGE_LIMIT,
    FlushReport,
    MountReport,
    StoreCounts,
)
from memsync.controller.conditions import Cond, condition, merge_conditions
from memsync.controller.sessionmemory.outcome import Outcome, plural, pod_outcome
from memsync.controller.sessionmemory.phases import (
    CONDITION_TYPES,
    FAILED,
    FIRST_SYNC_PENDING,
    FLUSH_NOT_REPORTED,
    FLUSHED,
    IN_SYNC,
    NODE_LOST,
    OPERATOR_VERDICTS,
    POD_LOST,
    RANK,
    READY,
    SPEC_APPLIED,
    STATUS_UNAVAILABLE,
    STORES_MOUNTED,
    SYNC_FAILING,
    SYNCED,
    TERMINAL_PHASES,
    is_refusal,
)
from memsync.controller.sessionmemory.pod import attempt_of_pod
from memsync.controller.sessionmemory.podview import pod_view
from memsync.crd.status_types import SessionMemoryStatus, StoreStatus

Status = SessionMemoryStatus


def _store_entries(
    stores: Mapping[str, str | None],
    previous: Any,
    mount_report: MountReport | None,
    flush_report: FlushReport | None,
) -> list[StoreStatus]:
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
    result: list[StoreStatus] = []
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
        result.append(cast(StoreStatus, entry))
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


def assemble(
    previous: Mapping[str, Any],
    outcome: Outcome,
    *,
    pod_name: str | None,
    stores: Mapping[str, str | None],
    generation: int | None,
    now: datetime,
) -> Status:
    status = cast(Status, {k: v for k, v in previous.items() if k != "kopf"})
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
    extra = [c for c in (outcome.synced, outcome.scheduled) if c is not None]
    if extra:
        status["conditions"] = merge_conditions(status["conditions"], extra, generation=generation, now=now)
        status["conditions"].sort(key=condition_order)
    _advance_last_sync(status, outcome.last_sync)
    return status


def condition_order(entry: Mapping[str, Any]) -> int:
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
            f"{sid}: {plural(h.failing_passes, 'failed pass', 'failed passes')}"
            + (f", last error: {h.last_error}" if h.last_error else "")
            for sid, h in sorted(failing.items())
        ]
        return Cond(SYNCED, "False", SYNC_FAILING, _FAILING_PART_SEPARATOR.join(parts))
    if not health.stores or any(h.outcome == "pending" for h in health.stores.values()):
        return Cond(SYNCED, "Unknown", FIRST_SYNC_PENDING, "the first sync of every store has not finished")
    return Cond(SYNCED, "True", IN_SYNC, f"every store synced ({plural(len(health.stores), 'store')})")


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
    status = cast(Status, {k: v for k, v in previous.items() if k != "kopf"})
    conditions = merge_conditions(
        previous.get("conditions"), [synced_condition(health, error)], generation=generation, now=now
    )
    status["conditions"] = sorted(conditions, key=condition_order)
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
    status["stores"] = cast(list[StoreStatus], entries)
    return status


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
    - A lost node's verdict (``NodeLost``) is replaced only by an end the Pod reports with its final flush
      (the node came back), not by the Pod's disappearance.
    - A Pod of an earlier attempt (the session was restarted since) changes nothing.
    """
    prev: Mapping[str, Any] = previous or {}
    restarts = prev.get("restarts")
    if isinstance(restarts, int) and attempt_of_pod(pod) < restarts:
        return cast(Status, dict(prev))
    outcome = pod_outcome(pod, pod_gone=pod_gone)
    pod_name = pod_view(pod).name or (prev.get("podName") if isinstance(prev.get("podName"), str) else None)
    prev_phase = prev.get("phase")
    if prev_phase in TERMINAL_PHASES and not is_refusal(prev) and prev.get("podName") == pod_name:
        verdict = (condition(prev, READY) or {}).get("reason")
        if (
            outcome.phase not in TERMINAL_PHASES
            or verdict in OPERATOR_VERDICTS
            or (verdict == NODE_LOST and outcome.flush_report is None)
        ):
            return cast(Status, dict(prev))
    elif prev_phase in RANK and outcome.phase in RANK and RANK[outcome.phase] < RANK[str(prev_phase)]:
        # Keep the phase that was reached; the conditions still say what is true now.
        outcome = dataclasses.replace(outcome, phase=str(prev_phase))
    return assemble(prev, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now)


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
    return assemble(prev, outcome, pod_name=None, stores=stores, generation=generation, now=now)


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
        return cast(Status, dict(prev))
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
    return assemble(prev, outcome, pod_name=pod_name, stores=stores, generation=generation, now=now)


def with_generation(previous: Mapping[str, Any] | None, generation: int | None) -> Status:
    """The same status, now marked as computed from ``generation`` (conditions included)."""
    status = cast(Status, dict(previous or {}))
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


def with_spec_applied(
    previous: Mapping[str, Any], applied: bool, message: str, generation: int | None, now: datetime
) -> Status:
    """The status with the ``SpecApplied`` condition: whether the running Pod was built from the spec."""
    status = with_generation(previous, generation)
    reason = "SpecApplied" if applied else "SpecChangeNotApplied"
    cond = Cond(SPEC_APPLIED, "True" if applied else "False", reason, message)
    status["conditions"] = sorted(
        merge_conditions(status.get("conditions"), [cond], generation=generation, now=now),
        key=condition_order,
    )
    return status


def status_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning ``old`` into ``new`` at the top level (dropped keys become None)."""
    old = old or {}
    patch: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    for key in old:
        if key not in new and key != "kopf":
            patch[key] = None
    return patch
