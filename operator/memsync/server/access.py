"""Who may call the store server: admin keys and sessions tokens, kept (as SHA-256 digests) in the database.

Every replica reads the same credentials, so a key or token minted or revoked on one replica is known to all.
Answers are cached per credential digest for ``AUTH_CACHE_TTL_S`` seconds (never past a token's expiry): a
revocation takes effect at once in the process that made it and within that time in the others. An answer
is never served longer than that after it was read; one in use may be read again before then (``refresh``:
the probe's fast path does, so a busy credential's requests never wait for the lookup).

- Admin keys are named; several may be current at once, so one can be rotated (create the new key, move the
  clients, revoke the old one). The key the server is started with is entered into the database on start.
- Viewer keys are named too, and read-only: they list and read every store and write nothing (the store
  browser's auditors). Both kinds are created, listed and revoked by an admin key (``keys.py``).
- Sessions tokens expire (the expiry is set when the session is minted) and are revoked when their session is
  deleted (``DELETE /v1/sessions/{id}``, or ``memsync store token revoke``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memsync.api.constants import MAX_STORES_PER_SESSION
from memsync.api.models import Access
from memsync.api.paths import default_mount_path
from memsync.api.secret import encode_work_secret
from memsync.server import bodies
from memsync.server.errors import conflict, forbidden, invalid, not_found, unauthenticated
from memsync.server.ids import (
    SESSION_PREFIX,
    api_key_id,
    format_ts,
    new_id,
    new_sessions_token,
    now_ts,
    parse_ts,
    token_hash,
)
from memsync.server.storage.database import (
    Database,
    DuplicateKeyError,
    ResourceRow,
    SessionRow,
    Tx,
)

#: How a lookup reads: ``Database.read_each`` (threadpool) or ``Database.read_now`` (event loop).
Reader = Callable[[], AbstractContextManager[Tx]]

AUTH_CACHE_TTL_S = 2.0
AUTH_CACHE_MAX = 20_000
#: A cached answer read this long ago (a share of ``AUTH_CACHE_TTL_S``) is due to be read again while it is
#: still served, so a credential in use is never missing from the cache.
AUTH_REFRESH_AT = 0.5
DEFAULT_SESSION_TOKEN_TTL_S = 24 * 3600
MAX_SESSION_TOKEN_TTL_S = 90 * 24 * 3600
INSTRUCTIONS_MAX = 4096


@dataclass(frozen=True)
class Principal:
    """An admin key (an ``api_actor``), a viewer key (``viewer``: every store, read only) or one session's
    token (a ``session_actor`` limited to its stores)."""

    actor_type: Literal["api_actor", "session_actor"]
    actor_id: str
    session: SessionRow | None = None
    viewer: bool = False

    @property
    def is_admin(self) -> bool:
        return self.session is None and not self.viewer

    def access_to(self, store_id: str) -> str | None:
        """``read_write``/``read_only`` for a store the caller reaches; None when the session cannot."""
        if self.session is None:
            return "read_only" if self.viewer else "read_write"
        for resource in self.session.resources:
            if resource.store_id == store_id:
                return resource.access
        return None

    @property
    def scope(self) -> str:
        if self.session is not None:
            return self.session.id
        return "viewer" if self.viewer else "admin"

    @property
    def described(self) -> str:
        """Who the caller is, for a refusal's message."""
        if self.session is not None:
            return f"session {self.actor_id}"
        return f"viewer key {self.actor_id}" if self.viewer else f"admin key {self.actor_id}"


def require_admin(p: Principal, action: str) -> None:
    if not p.is_admin:
        held = "a viewer key" if p.viewer else "a sessions token"
        raise forbidden(f"{held} cannot {action}; use an admin key (x-api-key)")


def _digest(x_api_key: str | None, authorization: str | None) -> str | None:
    """The digest the cache keeps for the credential these headers carry (``x-api-key`` first)."""
    if x_api_key is not None:
        return token_hash(x_api_key.strip())
    token = parse_bearer(authorization) if authorization is not None else None
    return token_hash(token) if token is not None else None


def parse_bearer(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


_REFUSED = "refused"  # a cached "no such current credential"


class CredentialCache:
    """digest -> (Principal or refusal, valid until, due again); bounded, thread-safe. Holds digests, never
    secrets. An answer is due to be read again (``lookup`` says so) from ``AUTH_REFRESH_AT`` of its time to
    live on, and is served until it expires, never longer.

    A lookup reads the database and then caches its answer; a revocation on this replica drops entries after
    it commits. So that a lookup that read before the commit cannot cache its stale answer after the drop,
    every drop starts a new generation and an answer is cached only in the generation its lookup began in."""

    def __init__(self, ttl_s: float, max_entries: int = AUTH_CACHE_MAX) -> None:
        self.ttl_s = ttl_s
        self._max = max_entries
        self._entries: dict[str, tuple[Principal | str, float, float]] = {}
        self._lock = threading.Lock()
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def get(self, digest: str, now: float) -> Principal | str | None:
        return self.lookup(digest, now)[0]

    def lookup(self, digest: str, now: float) -> tuple[Principal | str | None, bool]:
        """The answer cached for ``digest`` while it is served (else None), and whether it is due to be read
        again."""
        entry = self._entries.get(digest)
        if entry is None or entry[1] <= now:
            return None, False
        return entry[0], entry[2] <= now

    def put(
        self, digest: str, value: Principal | str, valid_until: float, generation: int, now: float
    ) -> None:
        with self._lock:
            if generation != self._generation:
                return  # a revocation since this lookup began: its answer may predate it
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[digest] = (value, valid_until, now + self.ttl_s * AUTH_REFRESH_AT)

    def drop_where(self, match: Any) -> None:
        with self._lock:
            self._generation += 1
            for digest in [d for d, (v, *_) in self._entries.items() if match(v)]:
                del self._entries[digest]


# --- request bodies (memsync extensions) ----------------------------------------------------------------


class MintResource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["memory_store"] = "memory_store"
    memory_store_id: str
    access: Access = "read_write"
    instructions: str | None = None


class MintSessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    resources: list[MintResource] = Field(default_factory=list)
    token_ttl_seconds: int | None = None
    # The environment whose work queue gets the session's work item, and events that play the agent's side
    # (both handled by the environment extension: memsync.server.environments.extension).
    environment_id: str | None = None
    script: list[dict[str, Any]] | None = None


#: Called inside the minting transaction with (transaction, session id, request, work-item secret); answers
#: extra fields of the mint response.
MintHook = Callable[[Tx, str, MintSessionRequest, str], dict[str, Any]]


def session_json(row: SessionRow) -> dict[str, Any]:
    return {
        "type": "session",
        "id": row.id,
        "created_at": row.created_at,
        "resources": [
            {
                "type": "memory_store",
                "memory_store_id": r.store_id,
                "name": r.name,
                "description": r.description,
                "mount_path": r.mount_path,
                "access": r.access,
                "instructions": r.instructions,
            }
            for r in row.resources
        ],
    }


class AccessService:
    """Authentication and sessions (mint, read, revoke); the configured admin key entered on start."""

    def __init__(
        self,
        db: Database,
        admin_key: str,
        public_url: str,
        *,
        admin_key_name: str = "default",
        session_token_ttl_s: int = DEFAULT_SESSION_TOKEN_TTL_S,
        cache_ttl_s: float = AUTH_CACHE_TTL_S,
    ) -> None:
        if not admin_key:
            raise ValueError("the admin key must not be empty")
        if not 1 <= session_token_ttl_s <= MAX_SESSION_TOKEN_TTL_S:
            raise ValueError(f"the sessions token lifetime must be 1 to {MAX_SESSION_TOKEN_TTL_S} seconds")
        self.db = db
        self.public_url = public_url.rstrip("/")
        self.session_token_ttl_s = session_token_ttl_s
        self.cache = CredentialCache(cache_ttl_s)
        self.admin_key_id = self._register_admin_key(admin_key, admin_key_name)
        self.on_mint: MintHook | None = None

    def _register_admin_key(self, key: str, name: str) -> str:
        """Enter the configured admin key into the database (once); refuse to start on a revoked one.
        Replicas starting together may race to enter it: the loser finds it entered."""
        key_id = api_key_id(key)
        for _ in range(2):
            try:
                with self.db.write() as tx:
                    row = tx.admin_key_by_hash(token_hash(key))
                    if row is None:
                        tx.insert_admin_key(key_id, bodies.validate_key_name(name), token_hash(key), now_ts())
            except DuplicateKeyError:
                continue
            if row is not None and row.revoked_at is not None:
                raise ValueError(
                    f"the configured admin key ({row.id}, named {row.name!r}) was revoked at "
                    f"{row.revoked_at}; configure a current admin key"
                )
            return key_id
        raise RuntimeError("could not enter the configured admin key")

    # --- authentication -----------------------------------------------------------------------------------

    def cached(self, x_api_key: str | None, authorization: str | None) -> Principal | None:
        """The caller from the cache alone (no I/O: safe on the event loop); None when the database must
        answer (unknown, refused or malformed credentials included, so errors come from ``authenticate``)."""
        return self.cached_and_due(x_api_key, authorization)[0]

    def cached_and_due(
        self, x_api_key: str | None, authorization: str | None
    ) -> tuple[Principal | None, bool]:
        """``cached``, and whether that answer is due to be read again (``refresh``) while still served."""
        digest = _digest(x_api_key, authorization)
        found, due = self.cache.lookup(digest, _now()) if digest is not None else (None, False)
        if not isinstance(found, Principal) or (x_api_key is not None and found.session is not None):
            return None, False
        return found, due

    def authenticate(self, x_api_key: str | None, authorization: str | None) -> Principal:
        """The caller, from the cache or the database; 401 for a missing, malformed or unknown credential."""
        return self._authenticate(x_api_key, authorization, self.db.read_each)

    def refresh(self, x_api_key: str | None, authorization: str | None) -> None:
        """Read this credential again from the database and cache the answer (blocking I/O)."""
        digest = _digest(x_api_key, authorization)
        if digest is not None:
            self._principal_for(digest, self.db.read_each, bearer=x_api_key is None, fresh=True)

    def authenticate_now(self, x_api_key: str | None, authorization: str | None) -> Principal:
        """``authenticate`` on the event loop, through ``Database.read_now``: raises ``WouldWait`` where the
        database cannot answer at once."""
        return self._authenticate(x_api_key, authorization, self.db.read_now)

    def _authenticate(self, x_api_key: str | None, authorization: str | None, read: Reader) -> Principal:
        if x_api_key is not None:
            key = self._principal_for(token_hash(x_api_key.strip()), read, bearer=False)
            if key is None or key.session is not None:
                raise unauthenticated(
                    "invalid x-api-key: it is not a current admin key or viewer key of this server"
                )
            return key
        if authorization is not None:
            token = parse_bearer(authorization)
            if token is None:
                raise unauthenticated("the Authorization header must be 'Bearer <sessions token>'")
            # The official Python SDK (2.x) sends its api_key as a Bearer token: an admin key works there too.
            found = self._principal_for(token_hash(token), read, bearer=True)
            if found is None:
                raise unauthenticated(
                    "invalid bearer token: it is not a current sessions token of this server "
                    "(unknown, expired or revoked)"
                )
            return found
        raise unauthenticated(
            "missing credential: send an admin key as x-api-key, or a sessions token as "
            "'Authorization: Bearer <token>'"
        )

    def _principal_for(
        self, digest: str, read: Reader, *, bearer: bool, fresh: bool = False
    ) -> Principal | None:
        """A bearer token is looked up as a session's first (what sidecars send), then as an admin key, then
        as a viewer key; an ``x-api-key`` as an admin key, then a viewer key. The rows read need no common
        snapshot: a credential is one row, and a session's resources are written with it and never changed."""
        now = _now()
        cached = None if fresh else self.cache.get(digest, now)
        if cached is not None:
            return cached if isinstance(cached, Principal) else None
        generation = self.cache.generation
        with read() as tx:
            session = tx.session_by_token_hash(digest) if bearer else None
            key = tx.admin_key_by_hash(digest) if session is None else None
            viewer = tx.viewer_key_by_hash(digest) if session is None and key is None else None
        principal: Principal | None = None
        valid_until = now + self.cache.ttl_s
        if key is not None and key.revoked_at is None:
            principal = Principal("api_actor", key.id)
        elif viewer is not None and viewer.revoked_at is None:
            principal = Principal("api_actor", viewer.id, viewer=True)
        elif session is not None and session.revoked_at is None:
            expires = parse_ts(session.expires_at).timestamp() if session.expires_at else None
            if expires is None or expires > now:
                principal = Principal("session_actor", session.id, session)
                valid_until = min(valid_until, expires or valid_until)
        self.cache.put(digest, principal or _REFUSED, valid_until, generation, now)
        return principal

    # --- sessions -----------------------------------------------------------------------------------------

    def get_session(self, p: Principal, session_id: str) -> dict[str, Any]:
        if p.session is not None:
            if p.session.id != session_id:
                raise not_found(f"session {session_id!r} not found")
            return session_json(p.session)
        with self.db.read() as tx:
            row = tx.get_session(session_id)
        if row is None:
            raise not_found(f"session {session_id!r} not found")
        return session_json(row)

    def delete_session(self, p: Principal, session_id: str) -> dict[str, Any]:
        """Delete a session: its token is revoked (the record stays: versions name it as their actor)."""
        require_admin(p, "delete sessions")
        with self.db.write() as tx:
            if tx.get_session(session_id) is None:
                raise not_found(f"session {session_id!r} not found")
            tx.revoke_session(session_id, now_ts())
        self.cache.drop_where(lambda v: isinstance(v, Principal) and v.actor_id == session_id)
        return {"type": "session_deleted", "id": session_id}

    def _token_ttl(self, requested: int | None) -> int:
        if requested is None:
            return self.session_token_ttl_s
        if not 1 <= requested <= MAX_SESSION_TOKEN_TTL_S:
            raise invalid(f"token_ttl_seconds must be 1 to {MAX_SESSION_TOKEN_TTL_S}, got {requested}")
        return requested

    def mint_session(self, p: Principal, raw: bytes) -> dict[str, Any]:
        """memsync extension: create a session with memory stores attached; answer its work-item secret."""
        require_admin(p, "mint sessions")
        req = bodies.parse_body(MintSessionRequest, raw)
        session_id = bodies.validate_session_id(req.session_id) if req.session_id else new_id(SESSION_PREFIX)
        ttl = self._token_ttl(req.token_ttl_seconds)
        if len(req.resources) > MAX_STORES_PER_SESSION:
            raise invalid(
                f"resources: at most {MAX_STORES_PER_SESSION} memory stores per session, "
                f"got {len(req.resources)}"
            )
        if req.environment_id is not None:
            bodies.validate_id(req.environment_id, "environment_id")
        seen: set[str] = set()
        for i, res in enumerate(req.resources):
            bodies.validate_id(res.memory_store_id, f"resources[{i}].memory_store_id")
            if res.memory_store_id in seen:
                raise invalid(f"resources[{i}]: memory store {res.memory_store_id} is attached twice")
            seen.add(res.memory_store_id)
            if res.instructions is not None:
                bodies.validate_stored_text(res.instructions, f"resources[{i}].instructions")
                if len(res.instructions) > INSTRUCTIONS_MAX:
                    raise invalid(
                        f"resources[{i}].instructions must be at most {INSTRUCTIONS_MAX} characters"
                    )
        token = new_sessions_token()
        try:
            with self.db.write() as tx:
                # Ordered with every other writer of each attached store (archive, delete, rename): the
                # stores' writer locks are taken before they are checked, in id order so that two mints
                # never wait on each other. Whichever of a mint and an archive takes a store first is first.
                for store_id in sorted(seen):
                    tx.lock_store_row(store_id)
                now = datetime.now(UTC)
                if tx.get_session(session_id) is not None:
                    raise conflict(f"session {session_id} already exists")
                resources = self._resources(tx, req.resources)
                tx.insert_session(
                    session_id,
                    token_hash(token),
                    format_ts(now),
                    resources,
                    expires_at=format_ts(now + timedelta(seconds=ttl)),
                )
                row = tx.get_session(session_id)
                secret = encode_work_secret(token, self.public_url)
                extra = self.on_mint(tx, session_id, req, secret) if self.on_mint is not None else {}
        except DuplicateKeyError:
            raise conflict(f"session {session_id} already exists") from None
        assert row is not None
        return {"session": session_json(row), "work_secret": secret, **extra}

    @staticmethod
    def _resources(tx: Tx, requested: list[MintResource]) -> list[ResourceRow]:
        resources: list[ResourceRow] = []
        mounts: dict[str, str] = {}
        for i, res in enumerate(requested):
            store = tx.get_store(res.memory_store_id)
            if store is None:
                raise not_found(f"resources[{i}]: memory store {res.memory_store_id!r} not found")
            if store.archived_at is not None:
                raise conflict(
                    f"resources[{i}]: memory store {store.id} is archived and cannot be attached to a session"
                )
            mount = default_mount_path(store.name, store.id)
            if mount in mounts:
                raise invalid(
                    f"resources[{i}]: memory stores {mounts[mount]} and {store.id} would both mount at "
                    f"{mount}; rename one of them"
                )
            mounts[mount] = store.id
            resources.append(
                ResourceRow(store.id, store.name, store.description, mount, res.access, res.instructions)
            )
        return resources


def _now() -> float:
    return datetime.now(UTC).timestamp()
