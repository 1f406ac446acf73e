"""Store endpoints of the store client: create, list, get, update, delete and archive."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from memsync.api.models import CreateStoreRequest, MemoryStore, MemoryStoreDeleted, Page, UpdateStoreRequest
from memsync.client.core import ClientCore, rfc3339, seg

__all__ = ["StoreEndpoints"]


class StoreEndpoints(ClientCore):
    """Memory store endpoints (create, list, get, update, delete, archive)."""

    async def create_store(
        self, name: str, *, description: str | None = None, metadata: dict[str, str] | None = None
    ) -> MemoryStore:
        request = CreateStoreRequest(name=name, description=description, metadata=metadata)
        body = request.model_dump(exclude_none=True)
        return await self._call(MemoryStore, "POST", "/v1/memory_stores", body=body)

    async def list_stores_page(
        self,
        *,
        include_archived: bool = False,
        limit: int | None = None,
        page: str | None = None,
        created_at_gte: datetime | None = None,
        created_at_lte: datetime | None = None,
    ) -> Page[MemoryStore]:
        params: list[tuple[str, str]] = []
        if limit is not None:
            params.append(("limit", str(limit)))
        if page is not None:
            params.append(("page", page))
        if include_archived:
            params.append(("include_archived", "true"))
        if created_at_gte is not None:
            params.append(("created_at[gte]", rfc3339("created_at_gte", created_at_gte)))
        if created_at_lte is not None:
            params.append(("created_at[lte]", rfc3339("created_at_lte", created_at_lte)))
        return await self._call(Page[MemoryStore], "GET", "/v1/memory_stores", params=params)

    def list_stores(
        self,
        *,
        include_archived: bool = False,
        limit: int | None = None,
        created_at_gte: datetime | None = None,
        created_at_lte: datetime | None = None,
    ) -> AsyncIterator[MemoryStore]:
        return self._paginate(
            functools.partial(
                self.list_stores_page,
                include_archived=include_archived,
                limit=limit,
                created_at_gte=created_at_gte,
                created_at_lte=created_at_lte,
            )
        )

    async def get_store(self, store_id: str) -> MemoryStore:
        return await self._call(MemoryStore, "GET", f"/v1/memory_stores/{seg(store_id)}")

    async def update_store(
        self,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: dict[str, str | None] | None = None,
    ) -> MemoryStore:
        fields: dict[str, Any] = {}
        if name is not None:
            fields["name"] = name
        if description is not None:
            fields["description"] = description
        if metadata is not None:
            fields["metadata"] = metadata
        # exclude_unset (not exclude_none): a None metadata value means "delete this key" and must go out.
        body = UpdateStoreRequest(**fields).model_dump(exclude_unset=True)
        return await self._call(MemoryStore, "POST", f"/v1/memory_stores/{seg(store_id)}", body=body)

    async def delete_store(self, store_id: str) -> MemoryStoreDeleted:
        return await self._call(MemoryStoreDeleted, "DELETE", f"/v1/memory_stores/{seg(store_id)}")

    async def archive_store(self, store_id: str) -> MemoryStore:
        return await self._call(MemoryStore, "POST", f"/v1/memory_stores/{seg(store_id)}/archive")
