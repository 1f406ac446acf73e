"""Routes of memory stores: create, list, read, update, archive, delete."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.api.models import CreateStoreRequest, MemoryStore, MemoryStoreDeleted, UpdateStoreRequest
from memsync.server.http.deps import Beta, Body, Caller, CreatedGte, CreatedLte, Limit, Page
from memsync.server.http.documents import MemoryStorePage
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import documented
from memsync.server.stores.service import StoreService


def router(service: StoreService) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/memory_stores",
        **documented(ok=MemoryStore, body=CreateStoreRequest, errors=(403, 413), summary="Create a store"),
    )
    def create_store(*, p: Caller, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.create_store(p, body))

    @router.get("/v1/memory_stores", **documented(ok=MemoryStorePage, summary="List stores"))
    def list_stores(
        *,
        p: Caller,
        limit: Limit = None,
        page: Page = None,
        include_archived: bool = False,
        created_at_gte: CreatedGte = None,
        created_at_lte: CreatedLte = None,
        beta: Beta = None,
    ) -> JSONResponse:
        return JSONResponse(
            service.list_stores(
                p,
                limit=limit,
                page=page,
                include_archived=include_archived,
                created_at_gte=created_at_gte,
                created_at_lte=created_at_lte,
            )
        )

    @router.get(
        "/v1/memory_stores/{store_id}", **documented(ok=MemoryStore, errors=(404,), summary="Get a store")
    )
    def get_store(*, p: Caller, store_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.get_store(p, store_id))

    @router.post(
        "/v1/memory_stores/{store_id}",
        **documented(
            ok=MemoryStore, body=UpdateStoreRequest, errors=(403, 404, 409, 413), summary="Update a store"
        ),
    )
    def update_store(*, p: Caller, store_id: str, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.update_store(p, store_id, body))

    @router.delete(
        "/v1/memory_stores/{store_id}",
        **documented(ok=MemoryStoreDeleted, errors=(403, 404), summary="Delete a store and all it holds"),
    )
    def delete_store(*, p: Caller, store_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.delete_store(p, store_id))

    @router.post(
        "/v1/memory_stores/{store_id}/archive",
        **documented(ok=MemoryStore, errors=(403, 404), summary="Archive a store (read-only from then on)"),
    )
    def archive_store(*, p: Caller, store_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.archive_store(p, store_id))

    return router
