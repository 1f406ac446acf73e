"""Routes of an environment's work queue: poll, stats, list, retrieve, ack, heartbeat, stop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from memsync.server.bodies import parse_body
from memsync.server.environments.work import StopWorkRequest, WorkItems
from memsync.server.http.deps import Body, EnvironmentCaller
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import SdkModel, documented

_WORK = "anthropic.types.beta.environments"
WORK_ITEM = SdkModel(_WORK, "BetaSelfHostedWork")


def router(work: WorkItems) -> APIRouter:
    router = APIRouter()

    @router.get(
        "/v1/environments/{env_id}/work/poll",
        **documented(
            ok=SdkModel(_WORK, "BetaSelfHostedWork", nullable=True),
            errors=(403, 404, 409),
            summary="Poll for work (null: none)",
        ),
    )
    def poll(
        c: EnvironmentCaller,
        env_id: str,
        block_ms: int | None = None,
        reclaim_older_than_ms: int | None = None,
        worker_id: Annotated[str | None, Header(alias="anthropic-worker-id")] = None,
    ) -> JSONResponse:
        # No work is the JSON ``null`` with 200 (never 204: clients parse the body).
        return JSONResponse(work.poll(c, env_id, block_ms, reclaim_older_than_ms, worker_id))

    @router.get(
        "/v1/environments/{env_id}/work/stats",
        **documented(
            ok=SdkModel(_WORK, "BetaSelfHostedWorkQueueStats"), errors=(403, 404), summary="Work queue stats"
        ),
    )
    def stats(c: EnvironmentCaller, env_id: str) -> JSONResponse:
        return JSONResponse(work.stats(c, env_id))

    @router.get(
        "/v1/environments/{env_id}/work",
        **documented(
            ok=SdkModel(_WORK, "BetaSelfHostedWorkListResponse"), errors=(403, 404), summary="List work items"
        ),
    )
    def list_work(
        c: EnvironmentCaller, env_id: str, limit: int | None = None, page: str | None = None
    ) -> JSONResponse:
        return JSONResponse(work.list_work(c, env_id, limit, page))

    @router.get(
        "/v1/environments/{env_id}/work/{work_id}",
        **documented(ok=WORK_ITEM, errors=(403, 404), summary="Get a work item"),
    )
    def retrieve(c: EnvironmentCaller, env_id: str, work_id: str) -> JSONResponse:
        return JSONResponse(work.retrieve(c, env_id, work_id))

    @router.post(
        "/v1/environments/{env_id}/work/{work_id}/ack",
        **documented(ok=WORK_ITEM, errors=(403, 404, 409), summary="Acknowledge a work item"),
    )
    def ack(c: EnvironmentCaller, env_id: str, work_id: str) -> JSONResponse:
        return JSONResponse(work.ack(c, env_id, work_id))

    @router.post(
        "/v1/environments/{env_id}/work/{work_id}/heartbeat",
        **documented(
            ok=SdkModel(_WORK, "BetaSelfHostedWorkHeartbeatResponse"),
            errors=(403, 404, 409, 412),
            summary="Extend a work item's lease",
        ),
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
        **documented(
            ok=WORK_ITEM,
            body=StopWorkRequest,
            body_required=False,
            errors=(403, 404, 409, 413),
            summary="Stop a work item",
        ),
    )
    def stop(c: EnvironmentCaller, env_id: str, work_id: str, raw: Body) -> JSONResponse:
        req = parse_body(StopWorkRequest, raw) if raw.strip() else StopWorkRequest()
        return JSONResponse(work.stop(c, env_id, work_id, req.force))

    return router
