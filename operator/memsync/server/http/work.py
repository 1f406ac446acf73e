"""Routes of an environment's work queue: poll, stats, list, retrieve, ack, heartbeat, stop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from memsync.server.bodies import parse_body
from memsync.server.environments.work import StopWorkRequest, WorkItems
from memsync.server.http.deps import Body, EnvironmentCaller
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import answers, body


def router(work: WorkItems) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/environments/{env_id}/work/poll", responses=answers(None, 403, 404))
    def poll(
        c: EnvironmentCaller,
        env_id: str,
        block_ms: int | None = None,
        reclaim_older_than_ms: int | None = None,
        worker_id: Annotated[str | None, Header(alias="anthropic-worker-id")] = None,
    ) -> JSONResponse:
        # No work is the JSON ``null`` with 200 (never 204: clients parse the body).
        return JSONResponse(work.poll(c, env_id, block_ms, reclaim_older_than_ms, worker_id))

    @router.get("/v1/environments/{env_id}/work/stats", responses=answers(None, 403, 404))
    def stats(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(work.stats(c, env_id))

    @router.get("/v1/environments/{env_id}/work", responses=answers(None, 403, 404))
    def list_work(
        c: EnvironmentCaller, env_id: str, limit: int | None = None, page: str | None = None
    ) -> JSONResponse:
        return JSONResponse(work.list_work(c, env_id, limit, page))

    @router.get("/v1/environments/{env_id}/work/{work_id}", responses=answers(None, 403, 404))
    def retrieve(c: EnvironmentCaller, env_id: str, work_id: str) -> JSONResponse:
        return JSONResponse(work.retrieve(c, env_id, work_id))

    @router.post("/v1/environments/{env_id}/work/{work_id}/ack", responses=answers(None, 403, 404, 409))
    def ack(c: EnvironmentCaller, env_id: str, work_id: str) -> JSONResponse:
        return JSONResponse(work.ack(c, env_id, work_id))

    @router.post(
        "/v1/environments/{env_id}/work/{work_id}/heartbeat", responses=answers(None, 403, 404, 409, 412)
    )
    def heartbeat(
        c: EnvironmentCaller,
        env_id: str,
        work_id: str,
        expected_last_heartbeat: str | None = None,
        desired_ttl_seconds: int | None = None,
    ) -> JSONResponse:
        return JSONResponse(work.heartbeat(c, env_id, work_id, expected_last_heartbeat, desired_ttl_seconds))

    @router.post(
        "/v1/environments/{env_id}/work/{work_id}/stop",
        responses=answers(None, 403, 404, 409, 413),
        openapi_extra=body(StopWorkRequest, required=False),
    )
    def stop(c: EnvironmentCaller, env_id: str, work_id: str, raw: Body) -> JSONResponse:
        req = parse_body(StopWorkRequest, raw) if raw.strip() else StopWorkRequest()
        return JSONResponse(work.stop(c, env_id, work_id, req.force))

    return router
