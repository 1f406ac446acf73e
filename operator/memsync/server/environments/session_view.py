"""The session object ``GET /v1/sessions/{id}`` answers, as a pure function of what the server knows.

The server has no model: a session's agent side is its script (or the admin key posting events by hand). The
object still carries every field a managed-agents session has, with values that say so: the agent is the
server's scripted agent (no model, no tools, no skills), no tokens were used, nothing was measured, and no
vault, budget or outcome evaluation exists. ``environment_id`` is the environment the session's work item was
queued in; a session minted without one has the empty string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: The agent every session of this server has: the script plays it (``model.id`` names no real model).
SCRIPTED_AGENT: Final[Mapping[str, Any]] = {
    "type": "agent",
    "id": "agent_memsync_scripted",
    "name": "memsync scripted agent",
    "description": "the store server plays the agent's side from the session's script; it runs no model",
    "version": 1,
    "model": {"id": "memsync-scripted"},
    "system": None,
    "tools": [],
    "skills": [],
    "mcp_servers": [],
    "execution_identity": {"type": "service_account"},
}


def session_object(
    base: Mapping[str, Any], *, environment_id: str | None, status: str, last_change: str | None
) -> dict[str, Any]:
    """``base`` (id, created_at, resources) completed into the full session object."""
    created = str(base["created_at"])
    return {
        **base,
        "type": "session",
        "agent": dict(SCRIPTED_AGENT),
        "environment_id": environment_id or "",
        "status": status,
        "title": None,
        "metadata": {},
        "vault_ids": [],
        "outcome_evaluations": [],
        "archived_at": None,
        "updated_at": max(created, last_change) if last_change else created,
        "stats": {"active_seconds": None, "duration_seconds": None},
        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0},
    }
