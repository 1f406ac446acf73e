"""A SessionMemory's phases, condition types and the reasons its conditions carry (plain constants).

Phases move forward only: Pending -> Mounting -> Running -> Flushing -> Succeeded | Failed (see
``derive.py`` for what each one means and ``outcome.py`` for how a Pod's state maps to them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from memsync.controller.conditions import condition
from memsync.crd.models import (
    CONDITION_FLUSHED,
    CONDITION_READY,
    CONDITION_SCHEDULED,
    CONDITION_SPEC_APPLIED,
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
RANK: Final = {PENDING: 0, MOUNTING: 1, RUNNING: 2, FLUSHING: 3}

READY: Final = CONDITION_READY
STORES_MOUNTED: Final = CONDITION_STORES_MOUNTED
FLUSHED: Final = CONDITION_FLUSHED
SYNCED: Final = CONDITION_SYNCED
SCHEDULED: Final = CONDITION_SCHEDULED
SPEC_APPLIED: Final = CONDITION_SPEC_APPLIED
CONDITION_TYPES: Final = (READY, STORES_MOUNTED, FLUSHED, SYNCED, SCHEDULED, SPEC_APPLIED)

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
#: The Pod condition the scheduler sets (False with reason Unschedulable while no node fits).
POD_SCHEDULED: Final = "PodScheduled"
#: The Pod reason of every kubelet eviction (local-storage evictions set it without a DisruptionTarget).
EVICTED: Final = "Evicted"
POD_FAILED: Final = "PodFailed"
POD_LOST: Final = "PodLost"
DELETION_TIMED_OUT: Final = "DeletionTimedOut"
#: memsync-sync had not started (its startupProbe never passed) within the sidecar start time after the
#: mount: the operator failed the session and deleted its Pod (the sandbox never ran).
SIDECAR_NOT_STARTED: Final = "SidecarNotStarted"
#: The sandbox container was not running ``startDeadlineSeconds`` after the SessionMemory was created: the
#: operator failed the session (naming the last reason it waited for) and deleted its Pod.
START_TIMEOUT: Final = "StartTimeout"
#: The Pod's node stopped answering (NotReady or Unknown past the operator's grace), is gone, or is tainted
#: out-of-service: the Pod cannot end there, so no final flush will be reported. A flush report the Pod sends
#: after all (the node came back) replaces this verdict.
NODE_LOST: Final = "NodeLost"
#: The operator lost its grants on the namespace's Pods while the SessionMemory was being deleted (namespaced
#: RBAC, and the namespace is being deleted): it released the object without seeing the Pod's end.
NAMESPACE_ACCESS_LOST: Final = "NamespaceAccessLost"
#: Outcomes the operator itself decided; what the Pod reports afterwards (its deletion) does not replace them.
OPERATOR_VERDICTS: Final = frozenset({SIDECAR_NOT_STARTED, START_TIMEOUT})

# Reasons of a session that waits without a Pod of its own (phase Pending; re-checked with a backoff until
# the start deadline): the API refused the Pod for a ResourceQuota or a LimitRange (the message is the
# API's), a Pod of an earlier SessionMemory of the same name still holds the name, or a restart after an
# interruption waits for the old Pod to be gone.
QUOTA_EXCEEDED: Final = "QuotaExceeded"
PREVIOUS_POD_TERMINATING: Final = "PreviousPodTerminating"
RESTARTING: Final = "Restarting"
WAITING_REASONS: Final = frozenset({QUOTA_EXCEEDED, PREVIOUS_POD_TERMINATING, RESTARTING})
FLUSH_INCOMPLETE: Final = "FlushIncomplete"
FLUSH_NOT_REPORTED: Final = "FlushNotReported"
SESSION_SUCCEEDED: Final = "SessionSucceeded"

# Reasons of the Synced condition.
IN_SYNC: Final = "InSync"
SYNC_FAILING: Final = "SyncFailing"
FIRST_SYNC_PENDING: Final = "FirstSyncPending"
STATUS_UNAVAILABLE: Final = "StatusUnavailable"


def ready_reason(status: Mapping[str, Any]) -> str | None:
    reason = (condition(status, READY) or {}).get("reason")
    return reason if isinstance(reason, str) else None


def is_waiting(status: Mapping[str, Any]) -> bool:
    """True when the session is Pending without a Pod of its own, waiting (``WAITING_REASONS``)."""
    return status.get("phase") == PENDING and ready_reason(status) in WAITING_REASONS


def is_refusal(status: Mapping[str, Any]) -> bool:
    """True when the status is a Failed refusal that happened before any Pod was created."""
    ready = condition(status, READY)
    return status.get("phase") == FAILED and ready is not None and ready.get("reason") in REFUSAL_REASONS


def holds_finalizer(status: Mapping[str, Any]) -> bool:
    """Whether memsync's finalizer stays on the SessionMemory: until its outcome (the final flush's too) is
    recorded. A refusal keeps it (it is re-checked and may still start a Pod)."""
    return status.get("phase") not in TERMINAL_PHASES or is_refusal(status)
