"""The environment extension as one unit: environments, their work queues and session event streams, joined
to session minting.

A session minted with an ``environment_id`` queues its work item, and one minted with a ``script`` starts it,
inside the minting transaction: :meth:`EnvironmentExtension.on_mint` is the hook the access service calls
there. The session object that workers read (``GET /v1/sessions/{id}``) is assembled here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memsync.server.access import AccessService, MintSessionRequest, Principal
from memsync.server.environments.events import SessionEvents
from memsync.server.environments.rules import DEFAULT_FIRST_HEARTBEAT_S
from memsync.server.environments.service import Caller, EnvironmentService
from memsync.server.environments.session_view import session_object
from memsync.server.environments.work import DEFAULT_LEASE_TTL_S, WorkItems
from memsync.server.errors import not_found
from memsync.server.storage.database import Database, Tx


@dataclass(frozen=True)
class EnvironmentExtension:
    """The environment services over one database, and what they add to a session."""

    access: AccessService
    envs: EnvironmentService
    work: WorkItems
    events: SessionEvents

    @classmethod
    def attach(
        cls,
        db: Database,
        access: AccessService,
        *,
        lease_ttl_s: int = DEFAULT_LEASE_TTL_S,
        first_heartbeat_s: int = DEFAULT_FIRST_HEARTBEAT_S,
    ) -> EnvironmentExtension:
        """The extension's services, with ``access`` minting sessions through :meth:`on_mint`."""
        envs = EnvironmentService(db, access)
        work = WorkItems(db, envs, lease_ttl_s=lease_ttl_s, first_heartbeat_s=first_heartbeat_s)
        extension = cls(access, envs, work, SessionEvents(db))
        access.on_mint = extension.on_mint
        return extension

    def on_mint(self, tx: Tx, session_id: str, req: MintSessionRequest, secret: str) -> dict[str, Any]:
        """Inside the minting transaction: start the session's script, queue its work item (the extra fields
        of the mint response)."""
        extra: dict[str, Any] = {}
        if req.script is not None:
            self.events.start_script(tx, session_id, req.script)
        if req.environment_id is not None:
            extra["work_id"] = self.work.enqueue_session(tx, req.environment_id, session_id, secret)
            self.work.queue_changed()  # a poller that wakes now waits for this transaction's commit
        return extra

    def session(self, c: Caller, session_id: str) -> dict[str, Any]:
        """The session object ``c`` may read (404 for a session it may not see)."""
        if not self.envs.may_read_session(c, session_id):
            raise not_found(f"session {session_id!r} not found")
        view = self.access.get_session(Principal("api_actor", self.access.admin_key_id), session_id)
        status, last_change = self.events.status_and_last_change(session_id)
        with self.envs.db.read_each() as tx:
            environment_id = tx.environment_of_session(session_id)
        return session_object(view, environment_id=environment_id, status=status, last_change=last_change)
