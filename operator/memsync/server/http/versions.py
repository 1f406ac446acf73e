"""Routes of a store's memory versions: list (filtered), read, redact."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from memsync.api.models import MemoryVersion
from memsync.server.bodies import validate_id
from memsync.server.http.deps import Beta, Caller, CreatedGte, CreatedLte, PagingQuery, ViewQuery
from memsync.server.http.documents import MemoryVersionPage
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import documented
from memsync.server.stores.service import StoreService


def version_filters(  # the listing's filters, each a query parameter
    *,
    memory_id: str | None = None,
    operation: str | None = None,
    session_id: str | None = None,
    api_key_id: str | None = None,
    service_account_id: str | None = None,
    created_at_gte: CreatedGte = None,
    created_at_lte: CreatedLte = None,
) -> dict[str, str | None]:
    for name, value in (
        ("memory_id", memory_id),
        ("session_id", session_id),
        ("api_key_id", api_key_id),
        ("service_account_id", service_account_id),
    ):
        if value is not None:
            validate_id(value, name)
    return {
        "memory_id": memory_id,
        "operation": operation,
        "session_id": session_id,
        "api_key_id": api_key_id,
        "service_account_id": service_account_id,
        "created_gte": created_at_gte,
        "created_lte": created_at_lte,
    }


VersionFilters = Annotated[dict[str, str | None], Depends(version_filters)]


def router(service: StoreService) -> APIRouter:
    router = APIRouter()

    @router.get(
        "/v1/memory_stores/{store_id}/memory_versions",
        **documented(ok=MemoryVersionPage, errors=(404,), summary="List memory versions"),
    )
    def list_versions(
        *, p: Caller, store_id: str, paging: PagingQuery, filters: VersionFilters, beta: Beta = None
    ) -> JSONResponse:
        return JSONResponse(
            service.list_versions(
                p, store_id, view=paging.view, limit=paging.limit, page=paging.page, filters=filters
            )
        )

    @router.get(
        "/v1/memory_stores/{store_id}/memory_versions/{version_id}",
        **documented(ok=MemoryVersion, errors=(404,), summary="Get a memory version"),
    )
    def get_version(
        *, p: Caller, store_id: str, version_id: str, view: ViewQuery = None, beta: Beta = None
    ) -> JSONResponse:
        return JSONResponse(service.get_version(p, store_id, version_id, view))

    @router.post(
        "/v1/memory_stores/{store_id}/memory_versions/{version_id}/redact",
        **documented(
            ok=MemoryVersion, errors=(403, 404, 409), summary="Redact a version: erase its content for good"
        ),
    )
    def redact_version(*, p: Caller, store_id: str, version_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(service.redact_version(p, store_id, version_id))

    return router
