"""Routes of the environment extension's environments and their keys."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.server.environments.service import CreateEnvironmentRequest, EnvironmentService
from memsync.server.http.deps import Body, EnvironmentCaller
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import answers, body


def router(envs: EnvironmentService) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/environments", responses=answers(None, 403, 413), openapi_extra=body(CreateEnvironmentRequest)
    )
    def create_environment(c: EnvironmentCaller, raw: Body) -> JSONResponse:
        return JSONResponse(envs.create_environment(c, raw))

    @router.get("/v1/environments", responses=answers(None, 403))
    def list_environments(c: EnvironmentCaller) -> JSONResponse:
        return JSONResponse(envs.list_environments(c))

    @router.get("/v1/environments/{env_id}", responses=answers(None, 403, 404))
    def get_environment(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.get_environment(c, env_id))

    @router.post("/v1/environments/{env_id}/archive", responses=answers(None, 403, 404))
    def archive_environment(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.archive_environment(c, env_id))

    @router.post("/v1/memsync/environments/{env_id}/keys", responses=answers(None, 403, 404))
    def create_key(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.create_key(c, env_id))

    @router.delete("/v1/memsync/environments/{env_id}/keys/{key_id}", responses=answers(None, 403, 404))
    def revoke_key(c: EnvironmentCaller, env_id: str, key_id: str) -> JSONResponse:
        return JSONResponse(envs.revoke_key(c, env_id, key_id))

    return router
