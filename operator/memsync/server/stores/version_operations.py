"""Version endpoints of the store server: list, get and redact memory versions."""

from __future__ import annotations

from typing import Any

from memsync.server.access import Principal, require_admin
from memsync.server.errors import (
    conflict,
    invalid,
    not_found,
)
from memsync.server.ids import now_ts
from memsync.server.stores import rules
from memsync.server.stores.core import ServiceCore
from memsync.server.stores.serialize import page_json, version_json

__all__ = ["VersionOperations"]


class VersionOperations(ServiceCore):
    """Memory version endpoints."""

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
