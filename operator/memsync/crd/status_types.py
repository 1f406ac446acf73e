"""The SessionMemory's ``status`` as typed dicts: the shape the operator writes and everything else reads.

The status travels as the plain camelCase JSON the API server serves, so its types are ``TypedDict``\\ s
(``total=False``: any field may be missing, e.g. before the first write), in the manner of kopf's typed
bodies. The controller derives it (``controller/sessionmemory/derive.py``), ``memsync status`` reads it
(``status/view.py``, which must not import kopf: nothing here does), and the tests check what the operator
writes against it. The CRD's status schema (``crd/schema.py``) holds the same fields.
"""

from __future__ import annotations

from typing import Literal, TypedDict

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(TypedDict, total=False):
    """One condition (metav1.Condition): ``Ready``, ``StoresMounted``, ``Flushed``, ``Synced``, ``Scheduled``
    or ``SpecApplied``."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    lastTransitionTime: str  # RFC 3339, UTC, whole seconds
    observedGeneration: int


class StoreStatus(TypedDict, total=False):
    """One store of the session: where it is mounted, what was mounted, and the sync's counts (the running
    totals while the session runs, the final flush's once it ended)."""

    memoryStoreId: str
    mountPath: str
    memoriesMounted: int
    uploaded: int
    downloaded: int
    deleted: int
    conflicts: int
    refused: int
    unreadable: int
    heldDeletes: int
    unsent: int  # only from the final flush
    refusedPaths: list[str]
    unreadablePaths: list[str]
    heldDeletePaths: list[str]


class SessionMemoryStatus(TypedDict, total=False):
    """The whole status of a SessionMemory."""

    phase: str  # crd.models.Phase: Pending, Mounting, Running, Flushing, Succeeded, Failed
    podName: str
    observedGeneration: int
    conditions: list[Condition]
    stores: list[StoreStatus]
    storeCount: int
    lastSyncTime: str  # RFC 3339, UTC, whole seconds; only ever moves forward
    message: str
    restarts: int  # new sandbox Pods started after interruptions (``spec.onInterruption: Restart``)
    lastRestartTime: str  # RFC 3339, UTC: when the latest restart was decided (its start deadline's origin)


#: Every field of a status entry, by part (what the tests hold the models in ``tests/support`` to).
STATUS_FIELDS = frozenset(SessionMemoryStatus.__annotations__)
CONDITION_FIELDS = frozenset(Condition.__annotations__)
STORE_FIELDS = frozenset(StoreStatus.__annotations__)
