"""Memory endpoints of the store server: create, get, update, delete and list memories (with its ETag)."""

from __future__ import annotations

import re
from typing import Any

from memsync.api.models import (
    CreateMemoryRequest,
    UpdateMemoryRequest,
)
from memsync.server import bodies
from memsync.server.access import Principal, Reader
from memsync.server.errors import (
    invalid,
    not_found,
    path_conflict,
    precondition_failed,
)
from memsync.server.ids import MEMORY_PREFIX, VERSION_PREFIX, new_id, now_ts
from memsync.server.storage.database import MemoryRow, Tx, VersionRow
from memsync.server.stores import rules
from memsync.server.stores.core import ServiceCore
from memsync.server.stores.serialize import memory_json, page_json, prefix_json

__all__ = ["MemoryOperations"]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class MemoryOperations(ServiceCore):
    """Memory endpoints: every write records a version in the same transaction."""

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
        req = bodies.parse_body(CreateMemoryRequest, raw)
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
        req = bodies.parse_body(UpdateMemoryRequest, raw)
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
        query = _listing_query(store_id, prefix, level, shown)
        position = self._position(page, query)
        if position is not None and not isinstance(position, str):
            raise invalid("page cursor does not belong to a memory listing")
        upper = rules.prefix_upper_bound(prefix)
        with_content = shown == "full"

        if if_none_match is not None:  # the common case of a polling client: one statement, no memory read
            unchanged = self._unchanged_etag(
                self.db.read_each, p, store_id, query, limit=n, position=position, if_none_match=if_none_match
            )
            if unchanged is not None:
                return None, unchanged
        with self.db.read() as tx:
            etag = self._etag(tx, p, store_id, query, limit=n, position=position)  # the page's own snapshot

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

    def first_page_unchanged(
        self, p: Principal, store_id: str, *, view: str | None, limit: int | None, if_none_match: str
    ) -> str | None:
        """The sidecar's probe (the first page of the default listing, ``If-None-Match``) answered by
        ``Database.read_now`` on the calling thread: the ETag when ``if_none_match`` names it (a 304, exactly
        as ``list_memories`` decides it), None when the page changed. Raises ``WouldWait`` when the database
        cannot answer at once, and the same errors as ``list_memories``."""
        shown = rules.resolve_view(view, "basic")
        n = rules.resolve_limit(limit, shown)
        query = _listing_query(store_id, rules.validate_list_prefix(None), rules.resolve_depth(None), shown)
        return self._unchanged_etag(
            self.db.read_now, p, store_id, query, limit=n, position=None, if_none_match=if_none_match
        )

    def _unchanged_etag(
        self,
        read: Reader,
        p: Principal,
        store_id: str,
        query: dict[str, object],
        *,
        limit: int,
        position: object,
        if_none_match: str,
    ) -> str | None:
        """The page's current ETag when ``if_none_match`` names it (a 304), else None: one statement read
        through ``read``, no memory read."""
        with read() as tx:
            etag = self._etag(tx, p, store_id, query, limit=limit, position=position)
        return etag if rules.etag_matches(if_none_match, etag) else None

    def _etag(
        self, tx: Tx, p: Principal, store_id: str, query: dict[str, object], *, limit: int, position: object
    ) -> str:
        """A listing page's ETag from the store's change marker (read in ``tx``, checked for reach)."""
        change_id, change_seq = self._change_for(tx, p, store_id)
        return rules.listing_etag(
            store_id, change_id, change_seq, query=query, limit=limit, position=position
        )


def _listing_query(store_id: str, prefix: str, depth: int, view: str) -> dict[str, object]:
    """What a memory listing's cursor and ETag are bound to (besides the page size and position)."""
    return {"kind": "memories", "store": store_id, "prefix": prefix, "depth": depth, "view": view}
