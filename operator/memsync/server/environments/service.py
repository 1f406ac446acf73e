"""Self-hosted environments on the store server: environments, their keys, and who may call what.

Callers are an admin key, an environment's key (kept as a hash, answered once when issued) or one
session's token. The work queue of an environment is :mod:`memsync.server.environments.work`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memsync.server import bodies
from memsync.server.access import AccessService, parse_bearer
from memsync.server.errors import forbidden, invalid, not_found, unauthenticated
from memsync.server.ids import new_id, now_ts, token_hash
from memsync.server.storage.database import Database, Tx
from memsync.server.storage.environment_queries import EnvironmentRow

ENVIRONMENT_PREFIX = "env_"
KEY_ID_PREFIX = "envkey_"
ENVIRONMENT_KEY_PREFIX = "msenv-"  # a memsync environment key; not any other service's key format


class CreateEnvironmentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=2048)
    metadata: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any] | None = None
    scope: str | None = None


@dataclass(frozen=True)
class Caller:
    """Who calls an environment endpoint: an admin key, an environment key, or one session's token."""

    kind: Literal["admin", "environment", "session"]
    environment_id: str | None = None
    session_id: str | None = None


def environment_json(row: EnvironmentRow) -> dict[str, Any]:
    return {
        "type": "environment",
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "metadata": dict(row.metadata),
        "config": {"type": "self_hosted"},
        "scope": "organization",
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "archived_at": row.archived_at,
    }


def environment_row(tx: Tx, env_id: str) -> EnvironmentRow:
    row = tx.get_environment(env_id)
    if row is None:
        raise not_found(f"environment {env_id!r} not found")
    return row


class EnvironmentService:
    """The environment endpoints' semantics over the server's database (synchronous, like StoreService)."""

    def __init__(self, db: Database, access: AccessService) -> None:
        self.db = db
        self.access = access

    # --- callers --------------------------------------------------------------------------------------------

    def authenticate(self, x_api_key: str | None, authorization: str | None) -> Caller:
        if x_api_key is None and authorization is not None:
            token = parse_bearer(authorization)
            if token is not None and token.startswith(ENVIRONMENT_KEY_PREFIX):
                with self.db.read_each() as tx:
                    env_id = tx.environment_of_key(token_hash(token))
                if env_id is None:
                    raise unauthenticated("invalid environment key: unknown or revoked")
                return Caller("environment", environment_id=env_id)
        principal = self.access.cached(x_api_key, authorization) or self.access.authenticate(
            x_api_key, authorization
        )
        if principal.viewer:
            raise forbidden("a viewer key cannot call the environment API; use an admin key")
        if principal.session is None:
            return Caller("admin")
        return Caller("session", session_id=principal.session.id)

    @staticmethod
    def require_admin(c: Caller, action: str) -> None:
        if c.kind != "admin":
            raise forbidden(f"only an admin key can {action}")

    @staticmethod
    def require_environment(c: Caller, environment_id: str) -> None:
        if c.kind == "admin" or (c.kind == "environment" and c.environment_id == environment_id):
            return
        raise forbidden(f"this call needs the environment key of {environment_id} (or an admin key)")

    def may_read_session(self, c: Caller, session_id: str) -> bool:
        """An admin key, the session's own token, or the key of an environment the session was queued in."""
        if c.kind == "admin" or (c.kind == "session" and c.session_id == session_id):
            return True
        if c.kind != "environment" or c.environment_id is None:
            return False
        with self.db.read_each() as tx:
            return tx.session_in_environment(session_id, c.environment_id)

    # --- environments and keys ------------------------------------------------------------------------------

    def create_environment(self, c: Caller, raw: bytes) -> dict[str, Any]:
        self.require_admin(c, "create environments")
        req = bodies.parse_body(CreateEnvironmentRequest, raw)
        if req.config is not None and req.config.get("type") != "self_hosted":
            raise invalid("config.type: this server runs only self_hosted environments")
        bodies.validate_stored_text(req.name, "name")
        bodies.validate_stored_text(req.description or "", "description")
        for key, value in req.metadata.items():
            bodies.validate_stored_text(key, "metadata key")
            bodies.validate_stored_text(value, f"metadata[{key!r}]")
        env_id = new_id(ENVIRONMENT_PREFIX)
        with self.db.write() as tx:
            tx.insert_environment(env_id, req.name, req.description, req.metadata, now_ts())
            row = environment_row(tx, env_id)
        return environment_json(row)

    def get_environment(self, c: Caller, env_id: str) -> dict[str, Any]:
        self.require_environment(c, env_id)
        with self.db.read() as tx:
            return environment_json(environment_row(tx, env_id))

    def list_environments(self, c: Caller) -> dict[str, Any]:
        self.require_admin(c, "list environments")
        with self.db.read() as tx:
            rows = tx.list_environments()
        return {"data": [environment_json(r) for r in rows], "next_page": None}

    def archive_environment(self, c: Caller, env_id: str) -> dict[str, Any]:
        self.require_admin(c, "archive environments")
        with self.db.write() as tx:
            environment_row(tx, env_id)
            tx.archive_environment(env_id, now_ts())
            row = environment_row(tx, env_id)
        return environment_json(row)

    def create_key(self, c: Caller, env_id: str) -> dict[str, Any]:
        """memsync extension: a new environment key. The key is answered once and kept only as a hash."""
        self.require_admin(c, "create environment keys")
        key = ENVIRONMENT_KEY_PREFIX + new_id("")
        key_id, now = new_id(KEY_ID_PREFIX), now_ts()
        with self.db.write() as tx:
            environment_row(tx, env_id)
            tx.insert_environment_key(key_id, env_id, token_hash(key), now)
        return {
            "type": "environment_key",
            "id": key_id,
            "environment_id": env_id,
            "key": key,
            "created_at": now,
        }

    def revoke_key(self, c: Caller, env_id: str, key_id: str) -> dict[str, Any]:
        self.require_admin(c, "revoke environment keys")
        with self.db.write() as tx:
            done = tx.revoke_environment_key(env_id, key_id, now_ts())
        if not done:
            raise not_found(f"environment key {key_id!r} of {env_id} not found")
        return {"type": "environment_key", "id": key_id, "environment_id": env_id, "revoked": True}
