"""The endpoints' semantics over the database for stores, memories and versions: what each call stores and
answers (who the caller is comes from ``access``).

Every method is synchronous (FastAPI runs it in its threadpool) and returns wire JSON or raises ApiError.
"""

from __future__ import annotations

from memsync.server.access import Principal
from memsync.server.stores.audit_operations import AuditOperations
from memsync.server.stores.memory_operations import MemoryOperations
from memsync.server.stores.store_operations import StoreOperations
from memsync.server.stores.version_operations import VersionOperations

__all__ = ["Principal", "StoreService"]


class StoreService(StoreOperations, MemoryOperations, VersionOperations, AuditOperations):
    """Memory stores, their memories and memory versions; the store browser's reads."""
