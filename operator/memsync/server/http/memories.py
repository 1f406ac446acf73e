"""Routes of the memories in a store: create, list (conditional, by prefix, by depth), read, update,
delete."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import Response

from memsync.api.models import CreateMemoryRequest, Memory, MemoryDeleted, UpdateMemoryRequest
from memsync.server.http.deps import Beta, Body, Caller, PagingQuery, ViewQuery
from memsync.server.http.documents import MemoryListPage
from memsync.server.http.envelope import JSONResponse, header_lines
from memsync.server.http.openapi import documented
from memsync.server.stores.service import StoreService

_CACHE_CONTROL = "private, no-cache"  # a client may keep a listing, and must ask before reusing it
_CACHE_CONTROL_HEADER = (b"cache-control", _CACHE_CONTROL.encode("latin-1"))  # as the 304 sends it


def _validators(etag: str) -> dict[str, str]:
    return {"etag": etag, "cache-control": _CACHE_CONTROL}


def listing_response(body: dict[str, Any] | None, etag: str) -> Response:
    """A listing page with its validators, or 304 (``body`` None: the client's copy is current)."""
    if body is None:
        return Response(status_code=304, headers=_validators(etag))
    return JSONResponse(body, headers=_validators(etag))


async def send_not_modified(send: Callable[[dict[str, Any]], Awaitable[None]], etag: str) -> None:
    """The 304 of ``listing_response``, sent as the two ASGI messages themselves (the probe's fast path)."""
    headers = [(b"etag", etag.encode("latin-1")), _CACHE_CONTROL_HEADER]
    await send({"type": "http.response.start", "status": 304, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def not_modified(default_headers: list[tuple[bytes, bytes]], etag: str, request_id: str) -> bytes:
    """The same 304 as whole HTTP/1.1 bytes, as the server would write it (its default headers first, the
    request id last), for the HTTP protocol to write itself."""
    return b"".join(
        [
            b"HTTP/1.1 304 Not Modified\r\n",
            header_lines(default_headers),
            header_lines([(b"etag", etag.encode("latin-1")), _CACHE_CONTROL_HEADER]),
            b"request-id: " + request_id.encode("ascii") + b"\r\n\r\n",
        ]
    )


def router(service: StoreService) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/memory_stores/{store_id}/memories",
        **documented(
            ok=Memory, body=CreateMemoryRequest, errors=(403, 404, 409, 413), summary="Create a memory"
        ),
    )
    def create_memory(
        *, p: Caller, store_id: str, body: Body, view: ViewQuery = None, beta: Beta = None
    ) -> JSONResponse:
        return JSONResponse(service.create_memory(p, store_id, body, view))

    @router.get(
        "/v1/memory_stores/{store_id}/memories",
        **documented(
            ok=MemoryListPage,
            errors=(404,),
            summary="List memories (conditional: If-None-Match)",
            extra={
                304: {
                    "description": "Not modified: no memory of the store changed since the page's ETag.",
                    "headers": {"ETag": {"schema": {"type": "string"}}},
                }
            },
        ),
    )
    def list_memories(
        *,
        p: Caller,
        store_id: str,
        paging: PagingQuery,
        path_prefix: str | None = None,
        depth: int | None = None,
        if_none_match: Annotated[str | None, Header(alias="if-none-match")] = None,
        beta: Beta = None,
    ) -> Response:
        body, etag = service.list_memories(
            p,
            store_id,
            view=paging.view,
            limit=paging.limit,
            page=paging.page,
            path_prefix=path_prefix,
            depth=depth,
            if_none_match=if_none_match,
        )
        return listing_response(body, etag)

    @router.get(
        "/v1/memory_stores/{store_id}/memories/{memory_id}",
        **documented(ok=Memory, errors=(404,), summary="Get a memory"),
    )
    def get_memory(
        *, p: Caller, store_id: str, memory_id: str, view: ViewQuery = None, beta: Beta = None
    ) -> JSONResponse:
        return JSONResponse(service.get_memory(p, store_id, memory_id, view))

    @router.post(
        "/v1/memory_stores/{store_id}/memories/{memory_id}",
        **documented(
            ok=Memory,
            body=UpdateMemoryRequest,
            errors=(403, 404, 409, 413),
            summary="Update a memory (content, path, precondition)",
        ),
    )
    def update_memory(
        *, p: Caller, store_id: str, memory_id: str, body: Body, view: ViewQuery = None, beta: Beta = None
    ) -> JSONResponse:
        return JSONResponse(service.update_memory(p, store_id, memory_id, body, view))

    @router.delete(
        "/v1/memory_stores/{store_id}/memories/{memory_id}",
        **documented(ok=MemoryDeleted, errors=(403, 404, 409), summary="Delete a memory"),
    )
    def delete_memory(
        *,
        p: Caller,
        store_id: str,
        memory_id: str,
        expected_content_sha256: str | None = None,
        beta: Beta = None,
    ) -> JSONResponse:
        return JSONResponse(service.delete_memory(p, store_id, memory_id, expected_content_sha256))

    return router
