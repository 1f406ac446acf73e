"""The store service's shared part: the database, the store access check and page cursors."""

from __future__ import annotations

import time

from memsync.api.constants import MAX_MEMORIES_PER_STORE
from memsync.server.access import Principal
from memsync.server.errors import (
    ApiError,
    conflict,
    forbidden,
    not_found,
)
from memsync.server.storage.database import Database, StoreRow, Tx
from memsync.server.stores.cursor import CursorState, decode_cursor, encode_cursor, query_fingerprint

__all__ = ["ServiceCore"]


class ServiceCore:
    """The database, the limits, the store access check and page cursors shared by every group of
    ``StoreService`` endpoints."""

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
            raise _unreachable(store_id)
        if write:
            if access == "read_only":
                raise forbidden(
                    f"{p.described} has read_only access to memory store {store_id}; writes are refused"
                )
            if row.archived_at is not None:
                raise conflict(f"memory store {store_id} is archived and read-only; writes are refused")
        return row

    @staticmethod
    def _change_for(tx: Tx, p: Principal, store_id: str) -> tuple[str, int]:
        """The store's change marker for a read, checked for reach as ``_store_for`` checks it (404)."""
        change = tx.store_change(store_id) if p.access_to(store_id) is not None else None
        if change is None:
            raise _unreachable(store_id)
        return change

    @staticmethod
    def _stores_page(
        tx: Tx,
        p: Principal,
        *,
        include_archived: bool,
        gte: str | None = None,
        lte: str | None = None,
        before_seq: int | None,
        limit: int,
    ) -> list[StoreRow]:
        """Up to ``limit`` of the stores the caller reaches, newest first, below ``before_seq``."""
        only = None if p.session is None else [r.store_id for r in p.session.resources]
        return tx.list_stores(
            include_archived=include_archived,
            created_gte=gte,
            created_lte=lte,
            before_seq=before_seq,
            only_ids=only,
            limit=limit,
        )

    # --- cursors ------------------------------------------------------------------------------------------

    def _position(self, page: str | None, query: dict[str, object]) -> str | int | None:
        if page is None or page == "":
            return None
        return decode_cursor(self.db.cursor_key, page, query_fingerprint(query), time.time())

    def _next_page(self, position: str | int, query: dict[str, object]) -> str:
        state = CursorState(position, query_fingerprint(query), int(time.time()) + self.cursor_ttl_s)
        return encode_cursor(self.db.cursor_key, state)


def _unreachable(store_id: str) -> ApiError:
    """Unknown, or not attached to the caller's session: the same answer, so a session learns nothing."""
    return not_found(f"memory store {store_id!r} not found")
