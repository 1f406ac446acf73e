"""The endpoints' semantics over the database: who may do what, and what each call stores and answers.

Every method is synchronous (FastAPI runs it in its threadpool) and returns wire JSON or raises ApiError.
"""

from __future__ import annotations

import hmac
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memsync.api.constants import MAX_MEMORIES_PER_STORE, MAX_STORES_PER_SESSION
from memsync.api.models import (
    Access,
    CreateMemoryRequest,
    CreateStoreRequest,
    UpdateMemoryRequest,
    UpdateStoreRequest,
)
from memsync.api.paths import default_mount_path
from memsync.api.secret import encode_work_secret
from memsync.server import rules
from memsync.server.cursor import CursorState, decode_cursor, encode_cursor, query_fingerprint
from memsync.server.db import Database, MemoryRow, ResourceRow, SessionRow, StoreRow, VersionRow
from memsync.server.errors import (
    conflict,
    forbidden,
    invalid,
    not_found,
    path_conflict,
    precondition_failed,
    unauthenticated,
)
from memsync.server.ids import (
    MEMORY_PREFIX,
    SESSION_PREFIX,
    STORE_PREFIX,
    VERSION_PREFIX,
    api_key_id,
    new_id,
    new_sessions_token,
    now_ts,
    token_hash,
)
from memsync.server.serialize import (
    memory_json,
    page_json,
    prefix_json,
    session_json,
    store_json,
    version_json,
)

INSTRUCTIONS_MAX = 4096
SESSION_CACHE_MAX = 10_000
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# --- the memsync extension's request body ---------------------------------------------------------------


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
    # The environment whose work queue gets the session's work item, and events that play the agent's side
    # (both handled by the environment extension, memsync.server.environments).
    environment_id: str | None = None
    script: list[dict[str, Any]] | None = None


#: Called inside the minting transaction with (connection, session id, request, work-item secret); answers
#: extra fields of the mint response.
MintHook = Callable[[Any, str, MintSessionRequest, str], dict[str, Any]]


# --- who is calling -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """The admin key (an ``api_actor``) or one session's token (a ``session_actor`` limited to its stores)."""

    actor_type: Literal["api_actor", "session_actor"]
    actor_id: str
    session: SessionRow | None = None

    @property
    def is_admin(self) -> bool:
        return self.session is None

    def access_to(self, store_id: str) -> str | None:
        """``read_write``/``read_only`` for an attached store; None when the session cannot reach it."""
        if self.session is None:
            return "read_write"
        for resource in self.session.resources:
            if resource.store_id == store_id:
                return resource.access
        return None

    @property
    def scope(self) -> str:
        return "admin" if self.session is None else self.session.id


def _parse_bearer(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class StoreService:
    def __init__(
        self,
        db: Database,
        admin_key: str,
        public_url: str,
        *,
        cursor_ttl_s: int = 3600,
        max_memories_per_store: int = MAX_MEMORIES_PER_STORE,
    ) -> None:
        if not admin_key:
            raise ValueError("the admin key must not be empty")
        self.db = db
        self._admin_key = admin_key.encode("utf-8")
        self.admin_key_id = api_key_id(admin_key)
        self.public_url = public_url.rstrip("/")
        self.cursor_ttl_s = cursor_ttl_s
        self.max_memories = max_memories_per_store
        self._sessions: dict[str, SessionRow] = {}
        self._sessions_lock = threading.Lock()
        self.on_mint: MintHook | None = None

    # --- auth ---------------------------------------------------------------------------------------------

    def authenticate(self, x_api_key: str | None, authorization: str | None) -> Principal:
        if x_api_key is not None:
            if hmac.compare_digest(x_api_key.strip().encode("utf-8"), self._admin_key):
                return Principal("api_actor", self.admin_key_id)
            raise unauthenticated("invalid x-api-key: it is not this server's admin key")
        if authorization is not None:
            token = _parse_bearer(authorization)
            if token is None:
                raise unauthenticated("the Authorization header must be 'Bearer <sessions token>'")
            # The official Python SDK (2.x) sends its api_key as a Bearer token: accept the admin key there.
            if hmac.compare_digest(token.encode("utf-8"), self._admin_key):
                return Principal("api_actor", self.admin_key_id)
            session = self._session_for(token_hash(token))
            if session is None:
                raise unauthenticated("invalid bearer token: it is not a sessions token this server issued")
            return Principal("session_actor", session.id, session)
        raise unauthenticated(
            "missing credential: send the admin key as x-api-key, or a sessions token as "
            "'Authorization: Bearer <token>'"
        )

    def _session_for(self, digest: str) -> SessionRow | None:
        """The session a token hash belongs to. Sessions never change once minted, so found ones are cached
        (the cache holds hashes, never tokens)."""
        cached = self._sessions.get(digest)
        if cached is not None:
            return cached
        session = Database.session_by_token_hash(self.db.conn(), digest)
        if session is not None:
            with self._sessions_lock:
                if len(self._sessions) >= SESSION_CACHE_MAX:
                    self._sessions.clear()
                self._sessions[digest] = session
        return session

    @staticmethod
    def _require_admin(p: Principal, action: str) -> None:
        if not p.is_admin:
            raise forbidden(f"a sessions token cannot {action}; use the admin key (x-api-key)")

    def _store_for(self, conn: Any, p: Principal, store_id: str, *, write: bool) -> StoreRow:
        """The store, checked for reach (404: unknown, or not attached to the caller's session), access
        (403: a read_only attachment) and state (409: archived) when the call writes."""
        access = p.access_to(store_id)
        row = Database.get_store(conn, store_id) if access is not None else None
        if row is None:
            raise not_found(f"memory store {store_id!r} not found")
        if write:
            if access == "read_only":
                raise forbidden(
                    f"session {p.actor_id} has read_only access to memory store {store_id}; "
                    "writes are refused"
                )
            if row.archived_at is not None:
                raise conflict(f"memory store {store_id} is archived and read-only; writes are refused")
        return row

    # --- cursors ------------------------------------------------------------------------------------------

    def _position(self, page: str | None, query: dict[str, object]) -> str | int | None:
        if page is None or page == "":
            return None
        return decode_cursor(self.db.cursor_key, page, query_fingerprint(query), time.time())

    def _next_page(self, position: str | int, query: dict[str, object]) -> str:
        state = CursorState(position, query_fingerprint(query), int(time.time()) + self.cursor_ttl_s)
        return encode_cursor(self.db.cursor_key, state)

    # --- stores -------------------------------------------------------------------------------------------

    def create_store(self, p: Principal, raw: bytes) -> dict[str, Any]:
        self._require_admin(p, "create memory stores")
        req = rules.parse_body(CreateStoreRequest, raw)
        name = rules.validate_store_name(req.name)
        description = rules.validate_description(req.description or "")
        metadata = rules.validate_metadata(req.metadata or {})
        with self.db.write() as conn:
            row = Database.insert_store(
                conn,
                store_id=new_id(STORE_PREFIX),
                name=name,
                description=description,
                metadata=metadata,
                now=now_ts(),
            )
        return store_json(row)

    def list_stores(
        self,
        p: Principal,
        *,
        limit: int | None,
        page: str | None,
        include_archived: bool,
        created_at_gte: str | None,
        created_at_lte: str | None,
    ) -> dict[str, Any]:
        n = rules.resolve_limit(limit, "basic")
        gte = rules.parse_timestamp_filter(created_at_gte, "created_at[gte]")
        lte = rules.parse_timestamp_filter(created_at_lte, "created_at[lte]")
        query: dict[str, object] = {
            "kind": "stores",
            "scope": p.scope,
            "include_archived": include_archived,
            "gte": gte,
            "lte": lte,
        }
        position = self._position(page, query)
        if position is not None and not isinstance(position, int):
            raise invalid("page cursor does not belong to a memory store listing")
        only = None if p.session is None else [r.store_id for r in p.session.resources]
        rows = Database.list_stores(
            self.db.conn(),
            include_archived=include_archived,
            created_gte=gte,
            created_lte=lte,
            before_seq=position,
            only_ids=only,
            limit=n + 1,
        )
        more = len(rows) > n
        rows = rows[:n]
        next_page = self._next_page(rows[-1].seq, query) if more and rows else None
        return page_json([store_json(r) for r in rows], next_page)

    def get_store(self, p: Principal, store_id: str) -> dict[str, Any]:
        return store_json(self._store_for(self.db.conn(), p, store_id, write=False))

    def update_store(self, p: Principal, store_id: str, raw: bytes) -> dict[str, Any]:
        self._require_admin(p, "update memory stores")
        req = rules.parse_body(UpdateStoreRequest, raw)
        name = rules.validate_store_name(req.name) if req.name is not None else None
        description = rules.validate_description(req.description) if req.description is not None else None
        with self.db.write() as conn:
            row = self._store_for(conn, p, store_id, write=True)
            new_name = row.name if name is None else name
            new_description = row.description if description is None else description
            new_metadata = rules.merge_metadata(row.metadata, req.metadata)
            if (new_name, new_description, new_metadata) == (row.name, row.description, row.metadata):
                return store_json(row)
            Database.update_store(
                conn,
                store_id=store_id,
                name=new_name,
                description=new_description,
                metadata=new_metadata,
                now=now_ts(),
            )
            updated = Database.get_store(conn, store_id)
        assert updated is not None
        return store_json(updated)

    def archive_store(self, p: Principal, store_id: str) -> dict[str, Any]:
        self._require_admin(p, "archive memory stores")
        with self.db.write() as conn:
            self._store_for(conn, p, store_id, write=False)
            Database.archive_store(conn, store_id, now_ts())
            row = Database.get_store(conn, store_id)
        assert row is not None
        return store_json(row)

    def delete_store(self, p: Principal, store_id: str) -> dict[str, Any]:
        self._require_admin(p, "delete memory stores")
        with self.db.write() as conn:
            self._store_for(conn, p, store_id, write=False)
            Database.delete_store(conn, store_id)
        return {"type": "memory_store_deleted", "id": store_id}

    # --- memories -----------------------------------------------------------------------------------------

    def _raise_blocker(self, conn: Any, store_id: str, path: str, verb: str, exclude_id: str | None) -> None:
        blocker = Database.find_blocker(
            conn,
            store_id=store_id,
            path=path,
            ancestors=rules.ancestor_paths(path),
            below=rules.descendant_range(path),
            exclude_id=exclude_id,
        )
        if blocker is not None:
            blocker_id, blocker_path = blocker
            raise path_conflict(
                rules.describe_path_conflict(path, blocker_path, blocker_id, verb), blocker_id, blocker_path
            )

    def create_memory(self, p: Principal, store_id: str, raw: bytes, view: str | None) -> dict[str, Any]:
        shown = rules.resolve_view(view, "basic")
        req = rules.parse_body(CreateMemoryRequest, raw)
        path = rules.validate_memory_path(req.path)
        content = rules.check_content(req.content)
        now = now_ts()
        memory_id, version_id = new_id(MEMORY_PREFIX), new_id(VERSION_PREFIX)
        with self.db.write() as conn:
            self._store_for(conn, p, store_id, write=True)
            self._raise_blocker(conn, store_id, path, "create", None)
            if Database.count_memories(conn, store_id) >= self.max_memories:
                raise invalid(
                    f"memory store {store_id} already holds the maximum of {self.max_memories} memories; "
                    "delete some before creating more"
                )
            row = MemoryRow(
                memory_id, store_id, path, content.text, content.sha256, content.size, version_id, now, now
            )
            Database.insert_memory(conn, row)
            Database.insert_version(conn, self._version(p, row, "created", now))
        return memory_json(row, shown)

    @staticmethod
    def _version(p: Principal, m: MemoryRow, operation: str, now: str) -> VersionRow:
        deleted = operation == "deleted"
        return VersionRow(
            seq=0,
            id=m.version_id,
            store_id=m.store_id,
            memory_id=m.id,
            operation=operation,
            content=None if deleted else m.content,
            sha256=None if deleted else m.sha256,
            size=None if deleted else m.size,
            path=m.path,
            created_at=now,
            actor_type=p.actor_type,
            actor_id=p.actor_id,
            redacted_at=None,
            redactor_type=None,
            redactor_id=None,
        )

    def get_memory(self, p: Principal, store_id: str, memory_id: str, view: str | None) -> dict[str, Any]:
        shown = rules.resolve_view(view, "full")
        with self.db.read() as conn:
            self._store_for(conn, p, store_id, write=False)
            row = Database.get_memory(conn, store_id, memory_id, with_content=shown == "full")
        if row is None:
            raise not_found(f"memory {memory_id!r} not found in memory store {store_id}")
        return memory_json(row, shown)

    def update_memory(
        self, p: Principal, store_id: str, memory_id: str, raw: bytes, view: str | None
    ) -> dict[str, Any]:
        shown = rules.resolve_view(view, "basic")
        req = rules.parse_body(UpdateMemoryRequest, raw)
        if req.content is None and req.path is None:
            raise invalid("an update needs at least one of 'content' or 'path'")
        new_path = rules.validate_memory_path(req.path) if req.path is not None else None
        new_content = rules.check_content(req.content) if req.content is not None else None
        expected = req.precondition.content_sha256 if req.precondition is not None else None
        with self.db.write() as conn:
            self._store_for(conn, p, store_id, write=True)
            current = Database.get_memory(conn, store_id, memory_id)
            if current is None:
                raise not_found(f"memory {memory_id!r} not found in memory store {store_id}")
            assert current.content is not None
            decision = rules.decide_update(
                stored_path=current.path,
                stored_content=current.content,
                stored_sha256=current.sha256,
                new_content=None if new_content is None else new_content.text,
                new_path=new_path,
                precondition_sha256=expected,
            )
            if decision is rules.UpdateDecision.NOOP:
                return memory_json(current, shown)
            if decision is rules.UpdateDecision.PRECONDITION_FAILED:
                raise precondition_failed(
                    f"precondition failed: memory {memory_id} has content_sha256 {current.sha256}, "
                    f"the request expected {expected}; re-read it and retry"
                )
            if new_path is not None and new_path != current.path:
                self._raise_blocker(conn, store_id, new_path, "rename to", memory_id)
            now = now_ts()
            updated = MemoryRow(
                id=memory_id,
                store_id=store_id,
                path=current.path if new_path is None else new_path,
                content=current.content if new_content is None else new_content.text,
                sha256=current.sha256 if new_content is None else new_content.sha256,
                size=current.size if new_content is None else new_content.size,
                version_id=new_id(VERSION_PREFIX),
                created_at=current.created_at,
                updated_at=now,
            )
            Database.update_memory(conn, updated)
            Database.insert_version(conn, self._version(p, updated, "modified", now))
        return memory_json(updated, shown)

    def delete_memory(
        self, p: Principal, store_id: str, memory_id: str, expected_sha256: str | None
    ) -> dict[str, Any]:
        if expected_sha256 is not None and not _SHA256.match(expected_sha256):
            raise invalid("expected_content_sha256 must be 64 lowercase hexadecimal characters")
        with self.db.write() as conn:
            self._store_for(conn, p, store_id, write=True)
            current = Database.get_memory(conn, store_id, memory_id, with_content=False)
            if current is None:
                raise not_found(f"memory {memory_id!r} not found in memory store {store_id}")
            if expected_sha256 is not None and expected_sha256 != current.sha256:
                raise precondition_failed(
                    f"precondition failed: memory {memory_id} has content_sha256 {current.sha256}, "
                    f"expected_content_sha256 was {expected_sha256}; nothing was deleted"
                )
            now = now_ts()
            Database.delete_memory(conn, store_id, memory_id)
            tombstone = MemoryRow(
                memory_id,
                store_id,
                current.path,
                None,
                current.sha256,
                current.size,
                new_id(VERSION_PREFIX),
                now,
                now,
            )
            Database.insert_version(conn, self._version(p, tombstone, "deleted", now))
        return {"type": "memory_deleted", "id": memory_id}

    def list_memories(
        self,
        p: Principal,
        store_id: str,
        *,
        view: str | None,
        limit: int | None,
        page: str | None,
        path_prefix: str | None,
        depth: int | None,
    ) -> dict[str, Any]:
        shown = rules.resolve_view(view, "basic")
        n = rules.resolve_limit(limit, shown)
        prefix = rules.validate_list_prefix(path_prefix)
        level = rules.resolve_depth(depth)
        query: dict[str, object] = {
            "kind": "memories",
            "store": store_id,
            "prefix": prefix,
            "depth": level,
            "view": shown,
        }
        position = self._position(page, query)
        if position is not None and not isinstance(position, str):
            raise invalid("page cursor does not belong to a memory listing")
        upper = rules.prefix_upper_bound(prefix)
        with_content = shown == "full"
        with self.db.read() as conn:
            self._store_for(conn, p, store_id, write=False)

            def fetch(bound: str, inclusive: bool, count: int) -> list[MemoryRow]:
                return Database.memories_from(
                    conn,
                    store_id,
                    bound=bound,
                    inclusive=inclusive,
                    upper=upper,
                    limit=count,
                    with_content=with_content,
                )

            result = rules.collect_page(
                fetch, lambda row: row.path, prefix=prefix, depth=level, limit=n, after=position
            )
        items = [prefix_json(it) if isinstance(it, str) else memory_json(it, shown) for it in result.items]
        next_page = (
            self._next_page(result.last_key, query)
            if result.has_more and result.last_key is not None
            else None
        )
        return page_json(items, next_page)

    # --- versions -----------------------------------------------------------------------------------------

    def list_versions(
        self,
        p: Principal,
        store_id: str,
        *,
        view: str | None,
        limit: int | None,
        page: str | None,
        filters: dict[str, str | None],
    ) -> dict[str, Any]:
        shown = rules.resolve_view(view, "basic")
        n = rules.resolve_limit(limit, shown)
        rules.resolve_operation(filters.get("operation"))
        clean = dict(filters)
        clean["created_gte"] = rules.parse_timestamp_filter(filters.get("created_gte"), "created_at[gte]")
        clean["created_lte"] = rules.parse_timestamp_filter(filters.get("created_lte"), "created_at[lte]")
        query: dict[str, object] = {"kind": "versions", "store": store_id, "view": shown, **clean}
        position = self._position(page, query)
        if position is not None and not isinstance(position, int):
            raise invalid("page cursor does not belong to a memory version listing")
        with self.db.read() as conn:
            self._store_for(conn, p, store_id, write=False)
            rows = Database.list_versions(
                conn, store_id, filters=clean, before_seq=position, limit=n + 1, with_content=shown == "full"
            )
        more = len(rows) > n
        rows = rows[:n]
        next_page = self._next_page(rows[-1].seq, query) if more and rows else None
        return page_json([version_json(r, shown) for r in rows], next_page)

    def get_version(self, p: Principal, store_id: str, version_id: str, view: str | None) -> dict[str, Any]:
        shown = rules.resolve_view(view, "full")
        with self.db.read() as conn:
            self._store_for(conn, p, store_id, write=False)
            row = Database.get_version(conn, store_id, version_id, with_content=shown == "full")
        if row is None:
            raise not_found(f"memory version {version_id!r} not found in memory store {store_id}")
        return version_json(row, shown)

    def redact_version(self, p: Principal, store_id: str, version_id: str) -> dict[str, Any]:
        self._require_admin(p, "redact memory versions")
        with self.db.write() as conn:
            self._store_for(conn, p, store_id, write=False)
            row = Database.get_version(conn, store_id, version_id)
            if row is None:
                raise not_found(f"memory version {version_id!r} not found in memory store {store_id}")
            if row.redacted_at is None:
                live = Database.get_memory(conn, store_id, row.memory_id, with_content=False)
                if live is not None and live.version_id == version_id:
                    raise conflict(
                        f"memory version {version_id} is the current version of live memory {live.id}; "
                        "write a new version of the memory, or delete it, before redacting this one"
                    )
                Database.redact_version(conn, version_id, now_ts(), p.actor_type, p.actor_id)
                row = Database.get_version(conn, store_id, version_id)
        assert row is not None
        return version_json(row, "full")

    # --- sessions -----------------------------------------------------------------------------------------

    def get_session(self, p: Principal, session_id: str) -> dict[str, Any]:
        if p.session is not None:
            if p.session.id != session_id:
                raise not_found(f"session {session_id!r} not found")
            return session_json(p.session)
        row = Database.get_session(self.db.conn(), session_id)
        if row is None:
            raise not_found(f"session {session_id!r} not found")
        return session_json(row)

    def mint_session(self, p: Principal, raw: bytes) -> dict[str, Any]:
        """memsync extension: create a session with memory stores attached; answer its work-item secret."""
        self._require_admin(p, "mint sessions")
        req = rules.parse_body(MintSessionRequest, raw)
        session_id = rules.validate_session_id(req.session_id) if req.session_id else new_id(SESSION_PREFIX)
        if len(req.resources) > MAX_STORES_PER_SESSION:
            raise invalid(
                f"resources: at most {MAX_STORES_PER_SESSION} memory stores per session, "
                f"got {len(req.resources)}"
            )
        seen: set[str] = set()
        for i, res in enumerate(req.resources):
            if res.memory_store_id in seen:
                raise invalid(f"resources[{i}]: memory store {res.memory_store_id} is attached twice")
            seen.add(res.memory_store_id)
            if res.instructions is not None and len(res.instructions) > INSTRUCTIONS_MAX:
                raise invalid(f"resources[{i}].instructions must be at most {INSTRUCTIONS_MAX} characters")
        token = new_sessions_token()
        now = now_ts()
        with self.db.write() as conn:
            if Database.get_session(conn, session_id) is not None:
                raise conflict(f"session {session_id} already exists")
            resources: list[ResourceRow] = []
            mounts: dict[str, str] = {}
            for i, res in enumerate(req.resources):
                store = Database.get_store(conn, res.memory_store_id)
                if store is None:
                    raise not_found(f"resources[{i}]: memory store {res.memory_store_id!r} not found")
                if store.archived_at is not None:
                    raise conflict(
                        f"resources[{i}]: memory store {store.id} is archived "
                        "and cannot be attached to a session"
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
            Database.insert_session(conn, session_id, token_hash(token), now, resources)
            row = Database.get_session(conn, session_id)
            secret = encode_work_secret(token, self.public_url)
            extra = self.on_mint(conn, session_id, req, secret) if self.on_mint is not None else {}
        assert row is not None
        return {"session": session_json(row), "work_secret": secret, **extra}
