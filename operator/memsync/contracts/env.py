"""The sync agent's environment: every variable name, spelled here only, and the stores JSON.

The operator sets these on the ``memsync-mount`` and ``memsync-sync`` containers; the agent's command line
reads them (each is also a flag). ``RESERVED`` lists the names users may not override through the extra
environment of the memsync containers.

``StoreEntry`` and ``encode_stores`` (the stores JSON, a pydantic model) live in
``memsync.contracts.stores``, which imports from here and not the other way: this module costs no pydantic,
so the command line's help (which shows these names) starts at once.
"""

from __future__ import annotations

from typing import Final, Literal

SESSION_ID: Final = "MEMSYNC_SESSION_ID"
STORES: Final = "MEMSYNC_STORES"
SYNC_INTERVAL: Final = "MEMSYNC_SYNC_INTERVAL"
SYNC_DELETIONS: Final = "MEMSYNC_SYNC_DELETIONS"
EARLY_SYNC: Final = "MEMSYNC_EARLY_SYNC"  # true (default) | false: a settled change starts a pass
CONFLICT_POLICY: Final = "MEMSYNC_CONFLICT_POLICY"
FLUSH_TIMEOUT: Final = "MEMSYNC_FLUSH_TIMEOUT"
STATE_DIR: Final = "MEMSYNC_STATE_DIR"
TERMINATION_LOG: Final = "MEMSYNC_TERMINATION_LOG"
METRICS_PORT: Final = "MEMSYNC_METRICS_PORT"
LOG_FORMAT: Final = "MEMSYNC_LOG_FORMAT"
LOG_LEVEL: Final = "MEMSYNC_LOG_LEVEL"
BASE_URL: Final = "ANTHROPIC_BASE_URL"
WORK_SECRET: Final = "ANTHROPIC_WORK_SECRET"  # noqa: S105 - the variable's name, not a secret
# Test-only: map every absolute path of the configuration under this directory; shorten the delete window.
TEST_ROOT: Final = "MEMSYNC_TEST_ROOT"
TEST_DELETE_WINDOW: Final = "MEMSYNC_TEST_DELETE_WINDOW"

#: ``MEMSYNC_STORES`` of a SessionMemory without ``spec.stores``: ``memsync mount`` reads the stores from the
#: session (``GET /v1/sessions/{id}`` with the sessions token) and writes them to ``RESOLVED_STORES_FILE`` in
#: the state directory, where the sidecar and the preStop flush read them.
STORES_FROM_SESSION: Final = "session"
RESOLVED_STORES_FILE: Final = "session-stores.json"

#: Prefixes of the names memsync owns: extra environment for its containers may not set any of them.
RESERVED_PREFIXES: Final = ("MEMSYNC_", "ANTHROPIC_")

Access = Literal["read_write", "read_only"]
ConflictPolicy = Literal["storeWins", "keepLocalCopy"]
CONFLICT_POLICIES: Final = ("storeWins", "keepLocalCopy")


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of memsync's own variables (or could become one)."""
    return name.upper().startswith(RESERVED_PREFIXES)
