"""Version endpoints of the store client: list, get and redact memory versions."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TypedDict, Unpack

from memsync.api.models import MemoryVersion, Operation, Page, View
from memsync.client.core import ClientCore, rfc3339, seg

__all__ = ["VersionEndpoints", "VersionFilters"]


class VersionFilters(TypedDict, total=False):
    """Which versions a listing returns (each one given narrows it), and how much of each it shows."""

    memory_id: str | None
    operation: Operation | None
    session_id: str | None
    api_key_id: str | None
    service_account_id: str | None
    created_at_gte: datetime | None
    created_at_lte: datetime | None
    view: View | None


class VersionEndpoints(ClientCore):
    """Memory version endpoints (list, get, redact)."""

    async def list_versions_page(
        self,
        store_id: str,
        *,
        limit: int | None = None,
        page: str | None = None,
        **filters: Unpack[VersionFilters],
    ) -> Page[MemoryVersion]:
        params: list[tuple[str, str]] = []
        given: Mapping[str, object] = filters
        for name in ("memory_id", "operation", "session_id", "api_key_id", "service_account_id", "view"):
            value = given.get(name)
            if value is not None:
                params.append((name, str(value)))
        created_at_gte = filters.get("created_at_gte")
        if created_at_gte is not None:
            params.append(("created_at[gte]", rfc3339("created_at_gte", created_at_gte)))
        created_at_lte = filters.get("created_at_lte")
        if created_at_lte is not None:
            params.append(("created_at[lte]", rfc3339("created_at_lte", created_at_lte)))
        if limit is not None:
            params.append(("limit", str(limit)))
        if page is not None:
            params.append(("page", page))
        return await self._call(
            Page[MemoryVersion], "GET", f"/v1/memory_stores/{seg(store_id)}/memory_versions", params=params
        )

    def list_versions(
        self, store_id: str, *, limit: int | None = None, **filters: Unpack[VersionFilters]
    ) -> AsyncIterator[MemoryVersion]:
        return self._paginate(functools.partial(self.list_versions_page, store_id, limit=limit, **filters))

    async def get_version(self, store_id: str, version_id: str, *, view: View | None = None) -> MemoryVersion:
        params = [("view", view)] if view is not None else []
        return await self._call(
            MemoryVersion,
            "GET",
            f"/v1/memory_stores/{seg(store_id)}/memory_versions/{seg(version_id)}",
            params=params,
        )

    async def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        return await self._call(
            MemoryVersion,
            "POST",
            f"/v1/memory_stores/{seg(store_id)}/memory_versions/{seg(version_id)}/redact",
        )
