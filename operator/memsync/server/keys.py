"""Named keys, created, listed and revoked with an admin key (memsync extensions of the API):

- admin keys (``sk-memsync-admin-...``, ids ``apikey_...``): everything. Several may be current at once, so
  one can be rotated; the last current one cannot be revoked (nobody could administer the server);
- viewer keys (``sk-memsync-viewer-...``, ids ``viewerkey_...``): list and read every store, write nothing.
  They are what the store browser's auditors sign in with (``server/ui``), and they work on the memory store
  API's reads too (never on the environment API).

Both are kept as SHA-256 digests and answered in full only once, when created. Revoking a key takes effect at
once on this replica (and within the credential cache's time on the others), and ends the browser sessions
signed in with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from memsync.server import bodies
from memsync.server.access import AccessService, Principal, require_admin
from memsync.server.errors import conflict, not_found
from memsync.server.ids import (
    api_key_id,
    new_admin_key,
    new_id,
    new_viewer_key,
    now_ts,
    token_hash,
)
from memsync.server.storage.database import AdminKeyRow, Tx

KeyKind = Literal["admin", "viewer"]
VIEWER_KEY_ID_PREFIX = "viewerkey_"


class CreateKeyRequest(BaseModel):
    """The body that creates a named key (either kind)."""

    model_config = ConfigDict(extra="forbid")

    name: str


@dataclass(frozen=True)
class KeyKindInfo:
    kind: KeyKind
    noun: str  # "admin key"
    object_type: str  # the ``type`` of its JSON


KINDS: dict[KeyKind, KeyKindInfo] = {
    "admin": KeyKindInfo("admin", "admin key", "admin_key"),
    "viewer": KeyKindInfo("viewer", "viewer key", "viewer_key"),
}


def key_json(kind: KeyKind, row: AdminKeyRow) -> dict[str, Any]:
    return {
        "type": KINDS[kind].object_type,
        "id": row.id,
        "name": row.name,
        "created_at": row.created_at,
        "revoked_at": row.revoked_at,
    }


class NamedKeys:
    """Admin keys and viewer keys: create, list, revoke (each call with an admin key)."""

    def __init__(self, access: AccessService) -> None:
        self.access = access
        self.db = access.db

    def create(self, p: Principal, kind: KeyKind, raw: bytes) -> dict[str, Any]:
        """A new named key; the key itself is in this answer only."""
        info = KINDS[kind]
        require_admin(p, f"create {info.noun}s")
        name = bodies.validate_key_name(bodies.parse_body(CreateKeyRequest, raw).name, info.noun)
        with self.db.write() as tx:
            if kind == "admin":
                key = new_admin_key()
                tx.insert_admin_key(api_key_id(key), name, token_hash(key), now_ts())
            else:
                key = new_viewer_key()
                tx.insert_viewer_key(new_id(VIEWER_KEY_ID_PREFIX), name, token_hash(key), now_ts())
            row = _by_hash(tx, kind, token_hash(key))
        assert row is not None
        return {**key_json(kind, row), "key": key}

    def list(self, p: Principal, kind: KeyKind) -> dict[str, Any]:
        require_admin(p, f"list {KINDS[kind].noun}s")
        with self.db.read() as tx:
            rows = tx.list_admin_keys() if kind == "admin" else tx.list_viewer_keys()
        return {"data": [key_json(kind, r) for r in rows], "next_page": None}

    def revoke(self, p: Principal, kind: KeyKind, key_id: str) -> dict[str, Any]:
        """Revoke a key at once; the last current admin key cannot be revoked."""
        info = KINDS[kind]
        require_admin(p, f"revoke {info.noun}s")
        with self.db.write() as tx:
            if kind == "admin":
                tx.lock_admin_keys()  # two revocations cannot both count the other's key as still current
            row = _by_id(tx, kind, key_id)
            if row is None:
                raise not_found(f"{info.noun} {key_id!r} not found")
            if kind == "admin" and row.revoked_at is None and tx.count_current_admin_keys() == 1:
                raise conflict(f"admin key {key_id} is the last current admin key; create another first")
            now = now_ts()
            if kind == "admin":
                tx.revoke_admin_key(key_id, now)
            else:
                tx.revoke_viewer_key(key_id, now)
            tx.delete_browser_sessions_of(key_id)
            revoked = _by_id(tx, kind, key_id)
        self.access.cache.drop_where(lambda v: isinstance(v, Principal) and v.actor_id == key_id)
        assert revoked is not None
        return key_json(kind, revoked)


def _by_hash(tx: Tx, kind: KeyKind, digest: str) -> AdminKeyRow | None:
    return tx.admin_key_by_hash(digest) if kind == "admin" else tx.viewer_key_by_hash(digest)


def _by_id(tx: Tx, kind: KeyKind, key_id: str) -> AdminKeyRow | None:
    return tx.admin_key(key_id) if kind == "admin" else tx.viewer_key(key_id)
