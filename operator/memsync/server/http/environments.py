"""Routes of the environment extension's environments and their keys."""

from __future__ import annotations

from fastapi import APIRouter

from memsync.server.environments.service import CreateEnvironmentRequest, EnvironmentService
from memsync.server.http.deps import Body, EnvironmentCaller
from memsync.server.http.documents import EnvironmentKey, EnvironmentKeyRevoked
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import SdkModel, documented

ENVIRONMENT = SdkModel("anthropic.types.beta", "BetaEnvironment")


def router(envs: EnvironmentService) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/environments",
        **documented(
            ok=ENVIRONMENT, body=CreateEnvironmentRequest, errors=(403, 413), summary="Create an environment"
        ),
    )
    def create_environment(c: EnvironmentCaller, raw: Body) -> JSONResponse:
        return JSONResponse(envs.create_environment(c, raw))

    @router.get(
        "/v1/environments",
        **documented(
            ok=SdkModel("anthropic.types.beta", "BetaEnvironment", page=True),
            errors=(403,),
            summary="List environments",
        ),
    )
    def list_environments(c: EnvironmentCaller) -> JSONResponse:
        return JSONResponse(envs.list_environments(c))

    @router.get(
        "/v1/environments/{env_id}",
        **documented(ok=ENVIRONMENT, errors=(403, 404), summary="Get an environment"),
    )
    def get_environment(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.get_environment(c, env_id))

    @router.post(
        "/v1/environments/{env_id}/archive",
        **documented(ok=ENVIRONMENT, errors=(403, 404), summary="Archive an environment"),
    )
    def archive_environment(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.archive_environment(c, env_id))

    @router.post(
        "/v1/memsync/environments/{env_id}/keys",
        **documented(ok=EnvironmentKey, errors=(403, 404), summary="memsync: create an environment key"),
    )
    def create_key(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(envs.create_key(c, env_id))

    @router.delete(
        "/v1/memsync/environments/{env_id}/keys/{key_id}",
        **documented(
            ok=EnvironmentKeyRevoked, errors=(403, 404), summary="memsync: revoke an environment key"
        ),
    )
    def revoke_key(c: EnvironmentCaller, env_id: str, key_id: str) -> JSONResponse:
        return JSONResponse(envs.revoke_key(c, env_id, key_id))

    return router
