"""The endpoints' semantics over the database for stores, memories and versions: what each call stores and
answers (who the caller is comes from ``access``).

Every method is synchronous (FastAPI runs it in its threadpool) and returns wire JSON or raises ApiError.
"""

from __future__ import annotations

import re
import time
from typing import Any

from memsync.api.constants import MAX_MEMORIES_PER_STORE
from memsync.api.models import (
    CreateMemoryRequest,
    CreateStoreRequest,
    UpdateMemoryRequest,
    UpdateStoreRequest,
)
from memsync.server import rules
from memsync.server.access import Principal, require_admin
from memsync.server.cursor import CursorState, decode_cursor, encode_cursor, query_fingerprint
from memsync.server.db import Database, MemoryRow, StoreRow, Tx, VersionRow
from memsync.server.errors import (
    conflict,
    forbidden,
    invalid,
    not_found,
    path_conflict,
    precondition_failed,
)
from memsync.server.ids import MEMORY_PREFIX, STORE_PREFIX, VERSION_PREFIX, new_id, now_ts
from memsync.server.serialize import memory_json, page_json, prefix_json, store_json, version_json

__all__ = ["Principal", "StoreService"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class StoreService:
    """Memory stores, their memories and memory versions."""

    def __init__(
        self,
        db: Database,
        *,
        cursor_ttl_s: int = 3600,
        max_memories_per_store: int = MAX_MEMORIES_PER_STORE,
    ) -> None:
        self.db = db
        self.cursor_ttl_s = cursor_ttl_s
        self.max_memories = max_memories_per_store

    @staticmethod
    def _store_for(tx: Tx, p: Principal, store_id: str, *, write: bool, lock: bool = False) -> StoreRow:
        """The store, checked for reach (404: unknown, or not attached to the caller's session), access
        (403: a read_only attachment) and state (409: archived) when the call writes. In a write transaction
        (``write`` or ``lock``) the store's writer lock is taken first, before anything is checked."""
        access = p.access_to(store_id)
        row = tx.get_store(store_id, lock=write or lock) if access is not None else None
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
        require_admin(p, "create memory stores")
        req = rules.parse_body(CreateStoreRequest, raw)
        name = rules.validate_store_name(req.name)
        description = rules.validate_description(req.description or "")
        metadata = rules.validate_metadata(req.metadata or {})
        with self.db.write() as tx:
            row = tx.insert_store(
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
        with self.db.read() as tx:
            rows = tx.list_stores(
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
        with self.db.read() as tx:
            return store_json(self._store_for(tx, p, store_id, write=False))

    def update_store(self, p: Principal, store_id: str, raw: bytes) -> dict[str, Any]:
        require_admin(p, "update memory stores")
        req = rules.parse_body(UpdateStoreRequest, raw)
        name = rules.validate_store_name(req.name) if req.name is not None else None
        description = rules.validate_description(req.description) if req.description is not None else None
        with self.db.write() as tx:
            row = self._store_for(tx, p, store_id, write=True)
            new_name = row.name if name is None else name
            new_description = row.description if description is None else description
            new_metadata = rules.merge_metadata(row.metadata, req.metadata)
            if (new_name, new_description, new_metadata) == (row.name, row.description, row.metadata):
                return store_json(row)
            tx.update_store(
                store_id=store_id,
                name=new_name,
                description=new_description,
                metadata=new_metadata,
                now=now_ts(),
            )
            updated = tx.get_store(store_id)
        assert updated is not None
        return store_json(updated)

    def archive_store(self, p: Principal, store_id: str) -> dict[str, Any]:
        require_admin(p, "archive memory stores")
        with self.db.write() as tx:
            self._store_for(tx, p, store_id, write=False, lock=True)
            tx.archive_store(store_id, now_ts())
            row = tx.get_store(store_id)
        assert row is not None
        return store_json(row)

    def delete_store(self, p: Principal, store_id: str) -> dict[str, Any]:
        require_admin(p, "delete memory stores")
        with self.db.write() as tx:
            self._store_for(tx, p, store_id, write=False, lock=True)
            tx.delete_store(store_id)
        return {"type": "memory_store_deleted", "id": store_id}

    # --- memories -----------------------------------------------------------------------------------------

    def _raise_blocker(self, tx: Tx, store_id: str, path: str, verb: str, exclude_id: str | None) -> None:
        blocker = tx.find_blocker(
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
        with self.db.write() as tx:
            self._store_for(tx, p, store_id, write=True)
            self._raise_blocker(tx, store_id, path, "create", None)
            if tx.count_memories(store_id) >= self.max_memories:
                raise invalid(
                    f"memory store {store_id} already holds the maximum of {self.max_memories} memories; "
                    "delete some before creating more"
                )
            row = MemoryRow(
                memory_id, store_id, path, content.text, content.sha256, content.size, version_id, now, now
            )
            tx.insert_memory(row)
            tx.insert_version(self._version(p, row, "created", now))
            tx.store_changed(store_id, version_id)
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
        with self.db.read() as tx:
            self._store_for(tx, p, store_id, write=False)
            row = tx.get_memory(store_id, memory_id, with_content=shown == "full")
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
        with self.db.write() as tx:
            self._store_for(tx, p, store_id, write=True)
            current = tx.get_memory(store_id, memory_id)
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
                self._raise_blocker(tx, store_id, new_path, "rename to", memory_id)
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
            tx.update_memory(updated)
            tx.insert_version(self._version(p, updated, "modified", now))
            tx.store_changed(store_id, updated.version_id)
        return memory_json(updated, shown)

    def delete_memory(
        self, p: Principal, store_id: str, memory_id: str, expected_sha256: str | None
    ) -> dict[str, Any]:
        if expected_sha256 is not None and not _SHA256.match(expected_sha256):
            raise invalid("expected_content_sha256 must be 64 lowercase hexadecimal characters")
        with self.db.write() as tx:
            self._store_for(tx, p, store_id, write=True)
            current = tx.get_memory(store_id, memory_id, with_content=False)
            if current is None:
                raise not_found(f"memory {memory_id!r} not found in memory store {store_id}")
            if expected_sha256 is not None and expected_sha256 != current.sha256:
                raise precondition_failed(
                    f"precondition failed: memory {memory_id} has content_sha256 {current.sha256}, "
                    f"expected_content_sha256 was {expected_sha256}; nothing was deleted"
                )
            now = now_ts()
            tx.delete_memory(store_id, memory_id)
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
            tx.insert_version(self._version(p, tombstone, "deleted", now))
            tx.store_changed(store_id, tombstone.version_id)
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
        if_none_match: str | None = None,
    ) -> tuple[dict[str, Any] | None, str]:
        """One page and its ETag; ``(None, etag)`` when ``if_none_match`` names the current ETag (a 304: no
        memory of the store changed since, so the page would be the same)."""
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

        def etag_of(store: StoreRow) -> str:
            return rules.listing_etag(
                store.id, store.change_id, store.change_seq, query=query, limit=n, position=position
            )

        if if_none_match is not None:  # the common case of a polling client: one statement, no memory read
            with self.db.read_one() as tx:
                etag = etag_of(self._store_for(tx, p, store_id, write=False))
            if rules.etag_matches(if_none_match, etag):
                return None, etag
        with self.db.read() as tx:
            etag = etag_of(self._store_for(tx, p, store_id, write=False))  # the page's own snapshot

            def fetch(bound: str, inclusive: bool, count: int) -> list[MemoryRow]:
                return tx.memories_from(
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
        return page_json(items, next_page), etag

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
        with self.db.read() as tx:
            self._store_for(tx, p, store_id, write=False)
            rows = tx.list_versions(
                store_id, filters=clean, before_seq=position, limit=n + 1, with_content=shown == "full"
            )
        more = len(rows) > n
        rows = rows[:n]
        next_page = self._next_page(rows[-1].seq, query) if more and rows else None
        return page_json([version_json(r, shown) for r in rows], next_page)

    def get_version(self, p: Principal, store_id: str, version_id: str, view: str | None) -> dict[str, Any]:
        shown = rules.resolve_view(view, "full")
        with self.db.read() as tx:
            self._store_for(tx, p, store_id, write=False)
            row = tx.get_version(store_id, version_id, with_content=shown == "full")
        if row is None:
            raise not_found(f"memory version {version_id!r} not found in memory store {store_id}")
        return version_json(row, shown)

    def redact_version(self, p: Principal, store_id: str, version_id: str) -> dict[str, Any]:
        require_admin(p, "redact memory versions")
        with self.db.write() as tx:
            self._store_for(tx, p, store_id, write=False, lock=True)
            row = tx.get_version(store_id, version_id)
            if row is None:
                raise not_found(f"memory version {version_id!r} not found in memory store {store_id}")
            if row.redacted_at is None:
                live = tx.get_memory(store_id, row.memory_id, with_content=False)
                if live is not None and live.version_id == version_id:
                    raise conflict(
                        f"memory version {version_id} is the current version of live memory {live.id}; "
                        "write a new version of the memory, or delete it, before redacting this one"
                    )
                tx.redact_version(version_id, now_ts(), p.actor_type, p.actor_id)
                row = tx.get_version(store_id, version_id)
        assert row is not None
        return version_json(row, "full")
