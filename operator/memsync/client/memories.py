"""Memory endpoints of the store client: create, list (and the conditional listing probe), get, update and
delete."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from memsync.api.models import (
    ContentSha256Precondition,
    CreateMemoryRequest,
    Memory,
    MemoryDeleted,
    MemoryListItem,
    MemoryPrefix,
    Page,
    UpdateMemoryRequest,
    View,
)
from memsync.client.core import ClientCore, seg

__all__ = ["ListingProbe", "MemoryEndpoints"]

_MEMORY_PAGE: type[Page[Memory | MemoryPrefix]] = Page[MemoryListItem]


@dataclass(frozen=True)
class ListingProbe:
    """The answer to ``probe_memories``: the store listing's current ETag (None: the server has none) and
    whether it still matches the one asked about."""

    etag: str | None
    not_modified: bool


class MemoryEndpoints(ClientCore):
    """Memory endpoints (create, list, probe, get, update, delete)."""

    async def create_memory(
        self, store_id: str, path: str, content: str, *, view: View | None = None
    ) -> Memory:
        body = CreateMemoryRequest(path=path, content=content).model_dump()
        params = [("view", view)] if view is not None else []
        return await self._call(
            Memory, "POST", f"/v1/memory_stores/{seg(store_id)}/memories", params=params, body=body
        )

    async def list_memories_page(
        self,
        store_id: str,
        *,
        view: View = "basic",
        limit: int | None = None,
        page: str | None = None,
        path_prefix: str | None = None,
        depth: int | None = None,
    ) -> Page[Memory | MemoryPrefix]:
        params: list[tuple[str, str]] = [("view", view)]
        if limit is not None:
            params.append(("limit", str(limit)))
        if page is not None:
            params.append(("page", page))
        if path_prefix is not None:
            params.append(("path_prefix", path_prefix))
        if depth is not None:
            params.append(("depth", str(depth)))
        return await self._call(
            _MEMORY_PAGE, "GET", f"/v1/memory_stores/{seg(store_id)}/memories", params=params
        )

    async def probe_memories(self, store_id: str, *, if_none_match: str | None) -> ListingProbe:
        """memsync extension (conditional listing): has any memory of the store changed since the listing
        whose ETag is ``if_none_match``? One request (a one-item page, basic view). ``etag`` is None when the
        server offers no ETag (the hosted API): the caller must list in full."""
        response = await self._request(
            "GET",
            f"/v1/memory_stores/{seg(store_id)}/memories",
            params=[("view", "basic"), ("limit", "1")],
            if_none_match=if_none_match,
        )
        return ListingProbe(etag=response.headers.get("etag"), not_modified=response.status_code == 304)

    def list_memories(
        self,
        store_id: str,
        *,
        view: View = "basic",
        limit: int | None = None,
        path_prefix: str | None = None,
        depth: int | None = None,
    ) -> AsyncIterator[Memory | MemoryPrefix]:
        return self._paginate(
            functools.partial(
                self.list_memories_page,
                store_id,
                view=view,
                limit=limit,
                path_prefix=path_prefix,
                depth=depth,
            )
        )

    async def get_memory(self, store_id: str, memory_id: str, *, view: View = "full") -> Memory:
        return await self._call(
            Memory,
            "GET",
            f"/v1/memory_stores/{seg(store_id)}/memories/{seg(memory_id)}",
            params=[("view", view)],
        )

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None = None,
        path: str | None = None,
        expected_sha256: str | None = None,
        view: View | None = None,
    ) -> Memory:
        """Change content and/or path; with ``expected_sha256`` only if the stored content has that hash."""
        if content is None and path is None:
            raise ValueError(
                "update_memory needs content and/or path (a rename-only update passes just path)"
            )
        fields: dict[str, Any] = {}
        if content is not None:
            fields["content"] = content
        if path is not None:
            fields["path"] = path
        if expected_sha256 is not None:
            fields["precondition"] = ContentSha256Precondition(content_sha256=expected_sha256)
        body = UpdateMemoryRequest(**fields).model_dump(exclude_unset=True)
        if "precondition" in body:
            body["precondition"] = {"type": "content_sha256", "content_sha256": expected_sha256}
        params = [("view", view)] if view is not None else []
        return await self._call(
            Memory,
            "POST",
            f"/v1/memory_stores/{seg(store_id)}/memories/{seg(memory_id)}",
            params=params,
            body=body,
        )

    async def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha256: str | None = None
    ) -> MemoryDeleted:
        params = [("expected_content_sha256", expected_sha256)] if expected_sha256 is not None else []
        return await self._call(
            MemoryDeleted,
            "DELETE",
            f"/v1/memory_stores/{seg(store_id)}/memories/{seg(memory_id)}",
            params=params,
        )
