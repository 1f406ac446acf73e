"""Routes of the callers' credentials: sessions (mint, delete), admin keys and viewer keys (memsync
extensions)."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.server.access import AccessService, MintSessionRequest
from memsync.server.http.deps import Beta, Body, Caller
from memsync.server.http.documents import CreatedKey, MintedSession, NamedKey, NamedKeyPage
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import SdkModel, documented
from memsync.server.keys import KINDS, CreateKeyRequest, KeyKind, NamedKeys


def router(access: AccessService) -> APIRouter:
    router = APIRouter()
    keys = NamedKeys(access)

    # GET /v1/sessions/{session_id} is served by the environment extension (it adds status and the agent).

    @router.delete(
        "/v1/sessions/{session_id}",
        **documented(
            ok=SdkModel("anthropic.types.beta", "BetaManagedAgentsDeletedSession"),
            errors=(403, 404),
            summary="Delete a session (its sessions token is revoked)",
        ),
    )
    def delete_session(*, p: Caller, session_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.delete_session(p, session_id))

    @router.post(
        "/v1/memsync/sessions",
        **documented(
            ok=MintedSession,
            body=MintSessionRequest,
            errors=(403, 404, 409, 413),
            summary="memsync: mint a session with memory stores attached",
        ),
    )
    def mint_session(*, p: Caller, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(access.mint_session(p, body))

    for kind in KINDS:
        _key_routes(router, keys, kind)
    return router


def _key_routes(router: APIRouter, keys: NamedKeys, kind: KeyKind) -> None:
    """``/v1/memsync/{admin,viewer}_keys``: create, list, revoke."""
    base = f"/v1/memsync/{KINDS[kind].object_type}s"

    noun = KINDS[kind].noun

    @router.post(
        base,
        name=f"create_{kind}_key",
        **documented(
            ok=CreatedKey,
            body=CreateKeyRequest,
            errors=(403, 413),
            summary=f"memsync: create a{'n' if kind == 'admin' else ''} {noun}",
        ),
    )
    def create(*, p: Caller, body: Body, beta: Beta = None) -> JSONResponse:
        return JSONResponse(keys.create(p, kind, body))

    @router.get(
        base,
        name=f"list_{kind}_keys",
        **documented(ok=NamedKeyPage, errors=(403,), summary=f"memsync: list {noun}s"),
    )
    def list_keys(*, p: Caller, beta: Beta = None) -> JSONResponse:
        return JSONResponse(keys.list(p, kind))

    @router.post(
        base + "/{key_id}/revoke",
        name=f"revoke_{kind}_key",
        **documented(ok=NamedKey, errors=(403, 404, 409), summary=f"memsync: revoke {noun}"),
    )
    def revoke(*, p: Caller, key_id: str, beta: Beta = None) -> JSONResponse:
        return JSONResponse(keys.revoke(p, kind, key_id))
