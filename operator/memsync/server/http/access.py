"""Routes of the callers' credentials: sessions (mint, delete) and admin keys (memsync extensions)."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.server.access import AccessService, CreateAdminKeyRequest, MintSessionRequest
from memsync.server.http.deps import Beta, Body, Caller
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import answers, body


def router(access: AccessService) -> APIRouter:
    router = APIRouter()

    # GET /v1/sessions/{session_id} is served by the environment extension (it adds status and the agent).

    @router.delete("/v1/sessions/{session_id}", responses=answers(None, 403, 404))
    def delete_session(*, p: Caller, session_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.delete_session(p, session_id))

    @router.post(
        "/v1/memsync/sessions",
        responses=answers(None, 403, 404, 409, 413),
        openapi_extra=body(MintSessionRequest),
    )
    def mint_session(*, p: Caller, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.mint_session(p, body))

    @router.post(
        "/v1/memsync/admin_keys", responses=answers(None, 403, 413), openapi_extra=body(CreateAdminKeyRequest)
    )
    def create_admin_key(*, p: Caller, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.create_admin_key(p, body))

    @router.get("/v1/memsync/admin_keys", responses=answers(None, 403))
    def list_admin_keys(*, p: Caller, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.list_admin_keys(p))

    @router.post("/v1/memsync/admin_keys/{key_id}/revoke", responses=answers(None, 403, 404, 409))
    def revoke_admin_key(*, p: Caller, key_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.revoke_admin_key(p, key_id))

    return router
