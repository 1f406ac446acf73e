"""Routes of the environment extension's environments and their keys."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.server.environments.service import EnvironmentService
from memsync.server.http.deps import Body, EnvironmentCaller
from memsync.server.http.envelope import JSONResponse


def router(envs: EnvironmentService) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/environments")
    def create_environment(c: EnvironmentCaller, raw: Body) -> JSONResponse:
        return JSONResponse(envs.create_environment(c, raw))

    @router.get("/v1/environments")
    def list_environments(c: EnvironmentCaller) -> JSONResponse:
        return JSONResponse(envs.list_environments(c))

    @router.get("/v1/environments/{env_id}")
    def get_environment(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.get_environment(c, env_id))

    @router.post("/v1/environments/{env_id}/archive")
    def archive_environment(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.archive_environment(c, env_id))

    @router.post("/v1/memsync/environments/{env_id}/keys")
    def create_key(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.create_key(c, env_id))

    @router.delete("/v1/memsync/environments/{env_id}/keys/{key_id}")
    def revoke_key(c: EnvironmentCaller, env_id: str, key_id: str) -> JSONResponse:
        return JSONResponse(envs.revoke_key(c, env_id, key_id))

    return router
