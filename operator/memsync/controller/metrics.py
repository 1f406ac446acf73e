"""Prometheus metrics of the operator (served by ``memsync operator --metrics-port N``).

Counters of what happened to SessionMemories, as the operator saw it, a gauge of the SessionMemories it
holds now by phase (set from its in-memory view whenever it remembers or forgets one), and the work-item
lease handover of self-hosted environments. Labels are bounded sets (phases, condition reasons, outcomes),
never object names, so cardinality stays small in a large cluster.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from typing import Any, Final

from prometheus_client import Counter, Gauge, Histogram

from memsync.crd.models import PHASES

#: The ``phase`` label of a SessionMemory the operator has not written a status to yet.
NO_PHASE: Final = "None"

PHASE_CHANGES: Final = Counter(
    "memsync_operator_phase_changes_total",
    "SessionMemory phase changes recorded by the operator, by new phase and reason.",
    ["phase", "reason"],
)
PODS_CREATED: Final = Counter(
    "memsync_operator_pods_created_total",
    "Sandbox Pods created.",
)
PODS_ADOPTED: Final = Counter(
    "memsync_operator_pods_adopted_total",
    "Existing sandbox Pods adopted (after an operator restart or a lost status write).",
)
FLUSH_UNCONFIRMED: Final = Counter(
    "memsync_operator_flush_unconfirmed_total",
    "Sessions that ended without a confirmed complete final flush (FlushIncomplete, FlushNotReported).",
    ["reason"],
)
API_ERRORS: Final = Counter(
    "memsync_operator_api_errors_total",
    "Kubernetes API calls that failed and were retried, by HTTP status.",
    ["status"],
)
HANDOVER_SECONDS: Final = Histogram(
    "memsync_operator_environment_handover_seconds",
    "From the operator's acknowledgement of a work item to the first heartbeat of the Pod's runner, which "
    "took the lease over from the operator (the server's timestamps of both).",
    buckets=(1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600),
)
LEASES_RELEASED: Final = Counter(
    "memsync_operator_environment_leases_released_total",
    "Work-item leases the operator stopped holding, by outcome: taken_over (the runner holds it), stopping "
    "(the item is being stopped), lost (refused, re-queued or no heartbeat answered within the TTL), "
    "expired (its session did not start within the start deadline), released (the operator gave the item "
    "up itself).",
    ["outcome"],
)
WATCH_FORBIDDEN: Final = Gauge(
    "memsync_operator_watch_forbidden",
    "1 while the API forbids the operator to watch a resource in a namespace it serves (its RoleBinding is "
    "gone: the namespace is being deleted, or RBAC changed), else 0. The operator keeps running and retries.",
    ["namespace", "resource"],
)
SESSIONMEMORIES: Final = Gauge(
    "memsync_operator_sessionmemories",
    "SessionMemories the operator holds now, by phase (None: no status written yet).",
    ["phase"],
)


def count_phases(objects: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``objects`` (SessionMemories) are in each phase; every phase is present, 0 if none."""
    tally = Tally(str((obj.get("status") or {}).get("phase") or NO_PHASE) for obj in objects)
    return {phase: tally.get(phase, 0) for phase in [*PHASES, NO_PHASE, *sorted(tally)]}


def show_sessionmemories(objects: Iterable[Mapping[str, Any]]) -> None:
    for phase, count in count_phases(objects).items():
        SESSIONMEMORIES.labels(phase=phase).set(count)


LEADER: Final = Gauge(
    "memsync_operator_leader",
    "1 while this replica holds the leader election's Lease and acts, 0 while it stands by.",
)
LAST_RECONCILE: Final = Gauge(
    "memsync_operator_last_reconcile_timestamp_seconds",
    "Unix time when this replica last finished reconciling a SessionMemory (a handler or a periodic job).",
)
LAST_PERIODIC_ROUND: Final = Gauge(
    "memsync_operator_periodic_round_timestamp_seconds",
    "Unix time when the periodic loop (re-checks and sync-health watches) last completed a round.",
)
WITHOUT_STATUS: Final = Gauge(
    "memsync_operator_sessionmemories_without_status",
    "SessionMemories that have had no status for more than two minutes since their creation.",
)
