"""Routes of memory stores: create, list, read, update, archive, delete."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.api.models import CreateStoreRequest, MemoryStore, MemoryStoreDeleted, UpdateStoreRequest
from memsync.api.models import Page as PageOf
from memsync.server.http.deps import Beta, Body, Caller, CreatedGte, CreatedLte, Limit, Page
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import answers, body
from memsync.server.stores.service import StoreService


def router(service: StoreService) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/memory_stores", responses=answers(MemoryStore, 403, 413), openapi_extra=body(CreateStoreRequest)
    )
    def create_store(*, p: Caller, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.create_store(p, body))

    @router.get("/v1/memory_stores", responses=answers(PageOf[MemoryStore]))
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

    @router.get("/v1/memory_stores/{store_id}", responses=answers(MemoryStore, 404))
    def get_store(*, p: Caller, store_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.get_store(p, store_id))

    @router.post(
        "/v1/memory_stores/{store_id}",
        responses=answers(MemoryStore, 403, 404, 409, 413),
        openapi_extra=body(UpdateStoreRequest),
    )
    def update_store(*, p: Caller, store_id: str, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.update_store(p, store_id, body))

    @router.delete("/v1/memory_stores/{store_id}", responses=answers(MemoryStoreDeleted, 403, 404))
    def delete_store(*, p: Caller, store_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.delete_store(p, store_id))

    @router.post("/v1/memory_stores/{store_id}/archive", responses=answers(MemoryStore, 403, 404))
    def archive_store(*, p: Caller, store_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.archive_store(p, store_id))

    return router
