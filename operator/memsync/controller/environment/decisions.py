"""The environment poll loop's decisions, as pure functions over plain data.

What to do with a claimed work item, what to create for it (a Secret with the item's secret and a
SessionMemory owned by the AgentEnvironment, named after the session so a second claim finds the first),
how many sessions may still start, how long to back off, which finished SessionMemories have outlived their
retention, and the AgentEnvironment's status. The loop (``loop.py``) does the I/O around them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from pydantic import ValidationError

from memsync.api.secret import NO_SESSIONS_TOKEN
from memsync.contracts import runner
from memsync.contracts.stores import StoreEntry, encode_stores
from memsync.controller.conditions import Cond, merge_conditions
from memsync.controller.environment import starts
from memsync.controller.objects import meta_of
from memsync.controller.sessionmemory.phases import NODE_LOST
from memsync.controller.sessionmemory.pod import METRICS_PORT
from memsync.crd import agentenv as a
from memsync.crd.models import (
    API_VERSION,
    CONDITION_READY,
    KIND,
    LABEL_MANAGED_BY,
    LABEL_SESSION_ID,
    MANAGED_BY,
    StoreSpec,
)
from memsync.crd.spec_messages import describe_validation_error
from memsync.crd.status_types import ConditionStatus

SESSION_WORK: Final = "session"
TERMINAL_PHASES: Final = ("Succeeded", "Failed")
BACKOFF_MAX_S: Final = 60.0
#: Between two polls that found no work, the next poll starts 2 to 4 s after the previous one started (at
#: least 1 s after it ended): at most 30 polls a minute per AgentEnvironment, 20 on average.
IDLE_CYCLE_MIN_S: Final = 2.0
IDLE_CYCLE_JITTER_S: Final = 2.0
IDLE_PAUSE_MIN_S: Final = 1.0
#: The longest ``retry-after`` honoured as asked; a longer one waits this long, then asks again.
RETRY_AFTER_MAX_S: Final = 600.0
NAME_MAX: Final = 63
_HASH_LEN: Final = 8
REASON_UNAVAILABLE: Final = "EnvironmentUnavailable"
#: What an interruption (a drain, an eviction, a lost node) does to an environment's session.
ON_INTERRUPTION: Final = "Fail"


#: What the operator logs (and records as the last error) when it fails a work item whose session has
#: memory stores but which carried no secret: the SDK workers' documented wording, so one grep finds both.
NO_SECRET_WITH_STORES: Final = (
    f"{NO_SESSIONS_TOKEN}: the session has memory stores attached, and the memory endpoints reject the "
    "environment key, so they cannot be mounted; the work item was failed rather than run without them"
)
MISSING_WORK_ITEM_CREDENTIAL: Final = (
    "the work item carried no secret: the operator never gives the environment key to a sandbox, so it "
    "cannot run this session; the work item was failed"
)


@dataclass(frozen=True)
class WorkItem:
    id: str
    environment_id: str
    type: str
    session_id: str
    secret: str | None

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> WorkItem:
        data = raw.get("data") or {}
        secret = raw.get("secret")
        return cls(
            id=str(raw["id"]),
            environment_id=str(raw.get("environment_id") or ""),
            type=str(data.get("type") or ""),
            session_id=str(data.get("id") or ""),
            secret=secret if isinstance(secret, str) and secret.strip() else None,
        )


Action = Literal["create", "fail", "stop"]


@dataclass(frozen=True)
class ItemDecision:
    action: Action
    message: str = ""


def decide_item(item: WorkItem, session_has_stores: bool | None) -> ItemDecision:
    """``create`` its SessionMemory, ``fail`` it (stopped, counted as failed), or ``stop`` it (not ours to
    run: a healthcheck or another work type). ``session_has_stores`` matters only without a secret."""
    if item.type != SESSION_WORK:
        return ItemDecision("stop", f"work type {item.type!r} runs no session here; the item was stopped")
    if item.secret is None:
        return ItemDecision(
            "fail", NO_SECRET_WITH_STORES if session_has_stores else MISSING_WORK_ITEM_CREDENTIAL
        )
    return ItemDecision("create")


def object_name(session_id: str) -> str:
    """The SessionMemory (and Pod prefix) name of a session: a DNS label from the id, with a hash of the exact
    id (ids are case-sensitive, names are not)."""
    base = re.sub(r"[^a-z0-9-]+", "-", session_id.lower()).strip("-")
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:_HASH_LEN]
    # room for "-<hash>" and the Pod's "-sandbox" suffix, so the Pod name stays a short label too
    base = base[: NAME_MAX - len("-sandbox") - _HASH_LEN - 1].strip("-")
    return f"{base}-{digest}" if base else digest


def secret_name(session_id: str) -> str:
    return object_name(session_id) + "-work"


def capacity(max_concurrent: int, active: int, smems: Sequence[Mapping[str, Any]] = ()) -> int:
    """How many more items may be claimed: none while one of the environment's sessions waits for a quota
    or a LimitRange (a new item would only wait in the same full quota)."""
    if starts.waits_for_quota(smems):
        return 0
    return max(0, max_concurrent - active)


def backoff_seconds(failures: int, jitter: float) -> float:
    """After ``failures`` consecutive failed polls: 1, 2, 4 ... 60 s, plus ``jitter`` (0..1) seconds."""
    return min(BACKOFF_MAX_S, 2.0 ** max(0, failures - 1)) + jitter


def retry_delay(failures: int, jitter: float, retry_after: float | None) -> float:
    """The wait after a failed request: the backoff, or the server's ``retry-after`` when that is longer
    (up to ``RETRY_AFTER_MAX_S``)."""
    backoff = backoff_seconds(failures, jitter)
    if retry_after is None:
        return backoff
    return max(backoff, min(retry_after, RETRY_AFTER_MAX_S))


def idle_pause(jitter: float, poll_took_s: float) -> float:
    """The pause after a poll that found no work and took ``poll_took_s``: the next poll starts 2 to 4 s
    (``jitter`` 0..1) after this one started, and never less than 1 s after it ended."""
    cycle = IDLE_CYCLE_MIN_S + IDLE_CYCLE_JITTER_S * jitter
    return max(IDLE_PAUSE_MIN_S, cycle - poll_took_s)


def worker_id(configured: str | None, namespace: str, name: str, host: str, start: str) -> str:
    """The ``Anthropic-Worker-ID`` of one operator process serving one AgentEnvironment: the configured id
    (default ``<namespace>.<name>``), the replica's host name and a token new at every start."""
    return f"{configured or f'{namespace}.{name}'}.{host}-{start}"


class StoreResolutionError(ValueError):
    """The session's memory stores cannot become a SessionMemory's ``stores``; the message names the store."""


def stores_from_session(session: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The SessionMemory ``stores`` (camelCase) of a session as ``GET /v1/sessions/{id}`` answers it: every
    ``memory_store`` resource with its name, access and mount path, checked like a SessionMemory's."""
    out: list[dict[str, Any]] = []
    for i, res in enumerate(session.get("resources") or []):
        if not isinstance(res, Mapping) or res.get("type") != "memory_store":
            continue
        entry: dict[str, Any] = {
            "memoryStoreId": res.get("memory_store_id"),
            "name": res.get("name") or res.get("memory_store_id"),
            "access": res.get("access") or "read_write",
        }
        if res.get("mount_path"):
            entry["mountPath"] = res["mount_path"]
        try:
            StoreSpec.model_validate(entry)
        except ValidationError as exc:
            raise StoreResolutionError(
                f"the session's resources[{i}] cannot be mounted: "
                + describe_validation_error(exc, prefix=f"resources[{i}]")
            ) from None
        out.append(entry)
    return out


def stores_to_mount(session: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stores of a session the environment runs: at least one (a SessionMemory mounts one or more)."""
    stores = stores_from_session(session)
    if not stores:
        raise StoreResolutionError(
            "the session has no memory stores; this environment runs sessions with memory only"
        )
    return stores


def _owner(env: Mapping[str, Any]) -> dict[str, Any]:
    meta = meta_of(env)
    return {
        "apiVersion": a.API_VERSION,
        "kind": a.KIND,
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def work_id_of(obj: Mapping[str, Any]) -> str | None:
    """The work item a SessionMemory (or its Secret) was created for."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(a.ANNOTATION_WORK_ID)
    return value if isinstance(value, str) else None


def _labels(env: Mapping[str, Any], item: WorkItem) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        a.LABEL_ENVIRONMENT: str(meta_of(env).name),
        a.LABEL_WORK_ID: item.id[:NAME_MAX],
        LABEL_SESSION_ID: item.session_id[:NAME_MAX],
    }


def work_secret_manifest(env: Mapping[str, Any], item: WorkItem) -> dict[str, Any]:
    """The per-item Secret: the work item's secret under ``runner.SECRET_KEY``, owned by the environment."""
    assert item.secret is not None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(item.session_id),
            "namespace": meta_of(env).namespace,
            "labels": _labels(env, item),
            "annotations": {a.ANNOTATION_WORK_ID: item.id},
            "ownerReferences": [_owner(env)],
        },
        "stringData": {runner.SECRET_KEY: item.secret},
    }


def runner_env(item: WorkItem, base_url: str, stores: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The session runner's environment (``contracts/runner.py``) for the sandbox container."""
    entries = [
        StoreEntry(
            memory_store_id=s["memoryStoreId"],
            name=s["name"],
            mount_path=StoreSpec.model_validate(dict(s)).effective_mount_path,
            access=s["access"],
        )
        for s in stores
    ]
    return [
        {"name": runner.WORK_ID, "value": item.id},
        {"name": runner.ENVIRONMENT_ID, "value": item.environment_id},
        {"name": runner.SESSION_ID, "value": item.session_id},
        {"name": runner.BASE_URL, "value": base_url},
        {"name": runner.SIDECAR_PORT, "value": str(METRICS_PORT)},
        {"name": runner.STORES, "value": encode_stores(entries)},
        {
            "name": runner.WORK_SECRET,
            "valueFrom": {"secretKeyRef": {"name": secret_name(item.session_id), "key": runner.SECRET_KEY}},
        },
    ]


def session_memory_manifest(
    env: Mapping[str, Any], spec: a.AgentEnvironmentSpec, item: WorkItem, stores: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The SessionMemory of a claimed session: the environment's sandbox Pod template (with the runner's
    environment added to the sandbox container; the runner's names replace the user's) and sync settings;
    the session's stores."""
    template = spec.template.model_dump(by_alias=True, exclude_none=True)
    sandbox = dict(template["spec"]["containers"][0])
    ours = runner_env(item, spec.api_base_url, stores)
    names = {e["name"] for e in ours}
    sandbox["env"] = [e for e in sandbox.get("env") or [] if e.get("name") not in names] + ours
    template["spec"]["containers"] = [sandbox]
    body: dict[str, Any] = {
        "sessionId": item.session_id,
        "workItemSecretRef": {"name": secret_name(item.session_id), "key": runner.SECRET_KEY},
        "apiBaseUrl": spec.api_base_url,
        "stores": [dict(s) for s in stores],
        "sync": spec.sync.model_dump(by_alias=True, exclude_none=True),
        "template": template,
        # The work queue is how an environment's session runs again: its runner stops the item when its Pod
        # ends (evicted too), and the session's next message queues a new item, served by a new Pod.
        "onInterruption": ON_INTERRUPTION,
    }
    if spec.start_deadline_seconds is not None:
        body["startDeadlineSeconds"] = spec.start_deadline_seconds
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": object_name(item.session_id),
            "namespace": meta_of(env).namespace,
            "labels": _labels(env, item),
            "annotations": {a.ANNOTATION_WORK_ID: item.id},
            "ownerReferences": [_owner(env)],
        },
        "spec": body,
    }


# --- what exists ------------------------------------------------------------------------------------------


Existing = Literal["adopt", "done", "replace"]


def on_existing(existing: Mapping[str, Any], item: WorkItem, *, adopted: bool = False) -> Existing:
    """A SessionMemory of this session exists already while the operator holds ``item``: ``adopt`` it while
    it has not finished (wait: a re-delivered item's Pod may still run, or an earlier item's Pod is ending);
    ``replace`` it once it finished serving an earlier item of the session (a dormant session woke up), or
    finished after this process adopted it for this very item (the old Pod lost the lease when the item was
    re-delivered: a new Pod serves the item to its end), or ended because its node was lost (its Pod never
    ended: the item came back for another Pod); ``done`` when it had already finished serving this very item
    when the item came back (stop the item: it ran)."""
    lost = phase_of(existing) in TERMINAL_PHASES and starts.ready_reason(existing) == NODE_LOST
    if not lost and (is_active(existing) or meta_of(existing).deletion_timestamp is not None):
        return "adopt"
    if work_id_of(existing) != item.id or adopted or lost:
        return "replace"
    return "done"


def phase_of(smem: Mapping[str, Any]) -> str | None:
    phase = (smem.get("status") or {}).get("phase")
    return phase if isinstance(phase, str) else None


def finished_at(smem: Mapping[str, Any]) -> datetime | None:
    """When a finished SessionMemory finished (its Ready condition's last transition), else None."""
    if phase_of(smem) not in TERMINAL_PHASES:
        return None
    for cond in (smem.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION_READY:
            stamp = cond.get("lastTransitionTime")
            if isinstance(stamp, str):
                return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return None


def is_active(smem: Mapping[str, Any]) -> bool:
    return phase_of(smem) not in TERMINAL_PHASES and meta_of(smem).deletion_timestamp is None


def items_to_stop(smems: Sequence[Mapping[str, Any]], already: set[str], held: set[str]) -> list[str]:
    """The work ids of finished SessionMemories that were not stopped yet (by this process), except the
    ``held`` items that wait for a new SessionMemory (a re-delivered item is served to its end)."""
    out = []
    for smem in smems:
        work_id = work_id_of(smem)
        if (
            phase_of(smem) in TERMINAL_PHASES
            and work_id is not None
            and work_id not in already
            and work_id not in held
        ):
            out.append(work_id)
    return out


def expired(
    smems: Sequence[Mapping[str, Any]], now: datetime, retention_s: int, stopped: set[str]
) -> list[Mapping[str, Any]]:
    """The finished SessionMemories whose retention is over and whose work item was stopped (a retention of
    0 s still stops the item before its SessionMemory goes)."""
    out = []
    for smem in smems:
        done = finished_at(smem)
        work_id = work_id_of(smem)
        if (
            done is not None
            and meta_of(smem).deletion_timestamp is None
            and now - done >= timedelta(seconds=retention_s)
            and (work_id is None or work_id in stopped)
        ):
            out.append(smem)
    return out


# --- status -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What one pass of the loop saw (``error``: the last failure, None when the pass went well)."""

    active: int
    present_succeeded: int
    present_failed: int
    polled_at: str | None
    error: str | None
    key_problem: str | None = None
    unavailable: str | None = None  # the environment refused polling for good (archived, deleted)


def environment_status(
    previous: Mapping[str, Any], seen: Observation, tally: Mapping[str, int], now: str, generation: int | None
) -> dict[str, Any]:
    """The AgentEnvironment's status: phase, the Polling and Ready conditions, the counts."""
    polling: ConditionStatus
    if seen.unavailable is not None:
        phase, polling, reason, message = (
            a.EnvironmentPhase.FAILED,
            "False",
            REASON_UNAVAILABLE,
            seen.unavailable,
        )
    elif seen.key_problem is not None:
        phase, polling, reason, message = (
            a.EnvironmentPhase.FAILED,
            "False",
            "EnvironmentKeyUnavailable",
            seen.key_problem,
        )
    elif seen.error is not None:
        phase, polling, reason, message = a.EnvironmentPhase.DEGRADED, "False", "PollFailing", seen.error
    else:
        phase, polling, reason, message = (
            a.EnvironmentPhase.POLLING,
            "True",
            "Polling",
            "polling the work queue",
        )
    ready_reason = reason if polling == "False" else "Ready"
    wanted = [
        Cond(a.CONDITION_POLLING, polling, reason, message),
        Cond(a.CONDITION_READY, polling, ready_reason, message),
    ]
    conditions = merge_conditions(previous.get("conditions"), wanted, generation=None, now=now)
    out: dict[str, Any] = {
        "phase": str(phase),
        "conditions": conditions,
        "active": seen.active,
        "claimed": tally.get("claimed", 0),
        "succeeded": tally.get("retiredSucceeded", 0) + seen.present_succeeded,
        "failed": tally.get("retiredFailed", 0) + tally.get("itemsFailed", 0) + seen.present_failed,
        "tally": dict(tally),
        "lastPollTime": seen.polled_at or previous.get("lastPollTime"),
        "lastError": seen.unavailable or seen.key_problem or seen.error,
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return {k: v for k, v in out.items() if v is not None}


def _parse(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def worth_writing(previous: Mapping[str, Any], new: Mapping[str, Any], poll_time_every_s: float) -> bool:
    """Whether ``new`` differs from ``previous`` in more than a ``lastPollTime`` moved by less than
    ``poll_time_every_s`` (a pass polls about once a second; the status need not say so each time)."""
    # The held heartbeats are the holder's own record (written by it, never by the pass).
    previous = {k: v for k, v in previous.items() if k != a.STATUS_HELD_HEARTBEATS}
    if new == previous:
        return False
    if {k: v for k, v in new.items() if k != "lastPollTime"} != {
        k: v for k, v in previous.items() if k != "lastPollTime"
    }:
        return True
    before, after = _parse(previous.get("lastPollTime")), _parse(new.get("lastPollTime"))
    return before is None or after is None or (after - before).total_seconds() >= poll_time_every_s


def holds_to_resume(
    env: Mapping[str, Any], smems: Sequence[Mapping[str, Any]], held: set[str]
) -> list[tuple[str, str, str]]:
    """(work id, session id, heartbeat value) of the items an earlier holder (the old leader) recorded in the
    environment's status whose SessionMemory is still active and which this process does not hold."""
    recorded = (env.get("status") or {}).get(a.STATUS_HELD_HEARTBEATS) or {}
    out = []
    for smem in smems:
        work_id = work_id_of(smem)
        session_id = (smem.get("spec") or {}).get("sessionId")
        value = recorded.get(work_id) if isinstance(recorded, Mapping) and work_id else None
        if work_id and work_id not in held and isinstance(session_id, str) and is_active(smem) and value:
            out.append((work_id, session_id, str(value)))
    return out
