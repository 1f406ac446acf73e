"""Prometheus metrics of the operator (served by ``memsync operator --metrics-port N``).

Counters only: what happened to SessionMemories, as the operator saw it. Labels are bounded sets (phases
and condition reasons), never object names, so cardinality stays small in a large cluster.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

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
