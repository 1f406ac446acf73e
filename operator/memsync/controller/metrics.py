"""Prometheus metrics of the operator (served by ``memsync operator --metrics-port N``).

Counters of what happened to SessionMemories, as the operator saw it, and the work-item lease handover of
self-hosted environments. Labels are bounded sets (phases, condition reasons, outcomes), never object names,
so cardinality stays small in a large cluster.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

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
    "released (the operator gave the item up itself).",
    ["outcome"],
)
