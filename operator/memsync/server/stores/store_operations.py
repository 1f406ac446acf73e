"""Store endpoints of the store server: create, list, get, update, archive and delete memory stores."""

from __future__ import annotations

from typing import Any

from memsync.api.models import (
    CreateStoreRequest,
    UpdateStoreRequest,
)
from memsync.server import bodies
from memsync.server.access import Principal, require_admin
from memsync.server.errors import (
    invalid,
)
from memsync.server.ids import STORE_PREFIX, new_id, now_ts
from memsync.server.stores import rules
from memsync.server.stores.core import ServiceCore
from memsync.server.stores.serialize import page_json, store_json

__all__ = ["StoreOperations"]


class StoreOperations(ServiceCore):
    """Memory store endpoints."""

    def create_store(self, p: Principal, raw: bytes) -> dict[str, Any]:
        require_admin(p, "create memory stores")
        req = bodies.parse_body(CreateStoreRequest, raw)
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
        with self.db.read() as tx:
            rows = self._stores_page(
                tx, p, include_archived=include_archived, gte=gte, lte=lte, before_seq=position, limit=n + 1
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
        req = bodies.parse_body(UpdateStoreRequest, raw)
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
