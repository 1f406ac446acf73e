"""Self-hosted environments on the store server: environments, their keys, and who may call what.

Callers are the admin key, an environment's key (kept as a hash, answered once when issued) or one
session's token. The work queue of an environment is :mod:`memsync.server.work_items`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memsync.server import rules
from memsync.server.db import Database
from memsync.server.errors import forbidden, invalid, not_found, unauthenticated
from memsync.server.ids import new_id, now_ts, token_hash
from memsync.server.service import Principal, StoreService

SCHEMA = """
CREATE TABLE IF NOT EXISTS environments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    description TEXT,
    metadata TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    archived_at TEXT
);
CREATE TABLE IF NOT EXISTS environment_keys (
    id TEXT PRIMARY KEY,
    environment_id TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
"""

WORK_SCHEMA = """
CREATE TABLE IF NOT EXISTS work_items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    environment_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    secret TEXT,
    metadata TEXT NOT NULL,
    created_at TEXT NOT NULL,
    worker_id TEXT,
    lease TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS work_items_by_environment ON work_items (environment_id, seq);
CREATE INDEX IF NOT EXISTS work_items_by_session ON work_items (session_id);
"""

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
    """Who calls an environment endpoint: the admin key, an environment key, or one session's token."""

    kind: Literal["admin", "environment", "session"]
    environment_id: str | None = None
    session_id: str | None = None


def environment_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "type": "environment",
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "metadata": json.loads(row["metadata"]),
        "config": {"type": "self_hosted"},
        "scope": "organization",
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "archived_at": row["archived_at"],
    }


class EnvironmentService:
    """The environment endpoints' semantics over the server's database (synchronous, like StoreService)."""

    def __init__(self, db: Database, store: StoreService) -> None:
        self.db = db
        self.store = store
        db.conn().executescript(SCHEMA)
        db.conn().executescript(WORK_SCHEMA)  # may_read_session reads the queue's table

    # --- callers --------------------------------------------------------------------------------------------

    def authenticate(self, x_api_key: str | None, authorization: str | None) -> Caller:
        if x_api_key is None and authorization is not None:
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip().startswith(ENVIRONMENT_KEY_PREFIX):
                row = (
                    self.db.conn()
                    .execute(
                        "SELECT environment_id FROM environment_keys "
                        "WHERE key_hash = ? AND revoked_at IS NULL",
                        (token_hash(token.strip()),),
                    )
                    .fetchone()
                )
                if row is None:
                    raise unauthenticated("invalid environment key: unknown or revoked")
                return Caller("environment", environment_id=row["environment_id"])
        principal: Principal = self.store.authenticate(x_api_key, authorization)
        if principal.session is None:
            return Caller("admin")
        return Caller("session", session_id=principal.session.id)

    @staticmethod
    def require_admin(c: Caller, action: str) -> None:
        if c.kind != "admin":
            raise forbidden(f"only the admin key can {action}")

    @staticmethod
    def require_environment(c: Caller, environment_id: str) -> None:
        if c.kind == "admin" or (c.kind == "environment" and c.environment_id == environment_id):
            return
        raise forbidden(f"this call needs the environment key of {environment_id} (or the admin key)")

    def may_read_session(self, c: Caller, session_id: str) -> bool:
        if c.kind == "admin" or (c.kind == "session" and c.session_id == session_id):
            return True
        row = (
            self.db.conn()
            .execute(
                "SELECT 1 FROM work_items WHERE session_id = ? AND environment_id = ?",
                (session_id, c.environment_id),
            )
            .fetchone()
        )
        return c.kind == "environment" and row is not None

    # --- environments and keys ------------------------------------------------------------------------------

    def create_environment(self, c: Caller, raw: bytes) -> dict[str, Any]:
        self.require_admin(c, "create environments")
        req = rules.parse_body(CreateEnvironmentRequest, raw)
        if req.config is not None and req.config.get("type") != "self_hosted":
            raise invalid("config.type: this server runs only self_hosted environments")
        env_id, now = new_id(ENVIRONMENT_PREFIX), now_ts()
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO environments (id, name, description, metadata, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (env_id, req.name, req.description, json.dumps(req.metadata), now, now),
            )
        return self.get_environment(c, env_id)

    def environment_row(self, conn: sqlite3.Connection, env_id: str) -> sqlite3.Row:
        row: sqlite3.Row | None = conn.execute(
            "SELECT * FROM environments WHERE id = ?", (env_id,)
        ).fetchone()
        if row is None:
            raise not_found(f"environment {env_id!r} not found")
        return row

    def get_environment(self, c: Caller, env_id: str) -> dict[str, Any]:
        self.require_environment(c, env_id)
        return environment_json(self.environment_row(self.db.conn(), env_id))

    def list_environments(self, c: Caller) -> dict[str, Any]:
        self.require_admin(c, "list environments")
        rows = self.db.conn().execute("SELECT * FROM environments ORDER BY seq").fetchall()
        return {"data": [environment_json(r) for r in rows], "next_page": None}

    def archive_environment(self, c: Caller, env_id: str) -> dict[str, Any]:
        self.require_admin(c, "archive environments")
        with self.db.write() as conn:
            self.environment_row(conn, env_id)
            now = now_ts()
            conn.execute(
                "UPDATE environments SET archived_at = COALESCE(archived_at, ?), updated_at = ? WHERE id = ?",
                (now, now, env_id),
            )
        return self.get_environment(c, env_id)

    def create_key(self, c: Caller, env_id: str) -> dict[str, Any]:
        """memsync extension: a new environment key. The key is answered once and kept only as a hash."""
        self.require_admin(c, "create environment keys")
        key = ENVIRONMENT_KEY_PREFIX + new_id("")
        key_id, now = new_id(KEY_ID_PREFIX), now_ts()
        with self.db.write() as conn:
            self.environment_row(conn, env_id)
            conn.execute(
                "INSERT INTO environment_keys (id, environment_id, key_hash, created_at) VALUES (?, ?, ?, ?)",
                (key_id, env_id, token_hash(key), now),
            )
        return {
            "type": "environment_key",
            "id": key_id,
            "environment_id": env_id,
            "key": key,
            "created_at": now,
        }

    def revoke_key(self, c: Caller, env_id: str, key_id: str) -> dict[str, Any]:
        self.require_admin(c, "revoke environment keys")
        with self.db.write() as conn:
            done = conn.execute(
                "UPDATE environment_keys SET revoked_at = COALESCE(revoked_at, ?) "
                "WHERE id = ? AND environment_id = ?",
                (now_ts(), key_id, env_id),
            ).rowcount
        if not done:
            raise not_found(f"environment key {key_id!r} of {env_id} not found")
        return {"type": "environment_key", "id": key_id, "environment_id": env_id, "revoked": True}
