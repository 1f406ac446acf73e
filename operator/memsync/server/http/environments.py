"""HTTP glue of the environment extension: environments, the work queue and the session event stream."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse

from memsync.server.access import AccessService, MintSessionRequest, Principal
from memsync.server.environments.events import SessionEvents, check_posted
from memsync.server.environments.service import Caller, EnvironmentService
from memsync.server.environments.session_view import session_object
from memsync.server.environments.work import WorkItems
from memsync.server.errors import invalid, not_found
from memsync.server.storage.database import Tx
from memsync.server.stores.rules import parse_json_object

PING_EVERY_S = 15.0
RECHECK_S = 1.0  # a stream re-reads its session this often (another replica may have appended events)


def install(
    app: FastAPI,
    *,
    access: AccessService,
    envs: EnvironmentService,
    work: WorkItems,
    events: SessionEvents,
    read_body: Callable[[Request], Awaitable[bytes]],
) -> None:
    """Adds the environment, work and session-event routes to the store server's app."""

    def on_mint(tx: Tx, session_id: str, req: MintSessionRequest, secret: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if req.script is not None:
            events.start_script(tx, session_id, req.script)
        if req.environment_id is not None:
            extra["work_id"] = work.enqueue_session(tx, req.environment_id, session_id, secret)
            work.queue_changed()  # a poller that wakes now waits for this transaction's commit
        return extra

    access.on_mint = on_mint

    def caller(
        x_api_key: Annotated[str | None, Header(alias="x-api-key")] = None,
        authorization: Annotated[str | None, Header(alias="authorization")] = None,
    ) -> Caller:
        return envs.authenticate(x_api_key, authorization)

    Who = Annotated[Caller, Depends(caller)]

    Body = Annotated[bytes, Depends(read_body)]

    # --- environments --------------------------------------------------------------------------------------

    @app.post("/v1/environments")
    def create_environment(c: Who, raw: Body) -> JSONResponse:
        return JSONResponse(envs.create_environment(c, raw))

    @app.get("/v1/environments")
    def list_environments(c: Who) -> JSONResponse:
        return JSONResponse(envs.list_environments(c))

    @app.get("/v1/environments/{env_id}")
    def get_environment(c: Who, env_id: str) -> JSONResponse:
        return JSONResponse(envs.get_environment(c, env_id))

    @app.post("/v1/environments/{env_id}/archive")
    def archive_environment(c: Who, env_id: str) -> JSONResponse:
        return JSONResponse(envs.archive_environment(c, env_id))

    @app.post("/v1/memsync/environments/{env_id}/keys")
    def create_key(c: Who, env_id: str) -> JSONResponse:
        return JSONResponse(envs.create_key(c, env_id))

    @app.delete("/v1/memsync/environments/{env_id}/keys/{key_id}")
    def revoke_key(c: Who, env_id: str, key_id: str) -> JSONResponse:
        return JSONResponse(envs.revoke_key(c, env_id, key_id))

    # --- the work queue ------------------------------------------------------------------------------------

    @app.get("/v1/environments/{env_id}/work/poll")
    def poll(
        c: Who,
        env_id: str,
        block_ms: int | None = None,
        reclaim_older_than_ms: int | None = None,
        worker_id: Annotated[str | None, Header(alias="anthropic-worker-id")] = None,
    ) -> JSONResponse:
        # No work is the JSON ``null`` with 200 (never 204: clients parse the body).
        return JSONResponse(work.poll(c, env_id, block_ms, reclaim_older_than_ms, worker_id))

    @app.get("/v1/environments/{env_id}/work/stats")
    def stats(c: Who, env_id: str) -> JSONResponse:
        return JSONResponse(work.stats(c, env_id))

    @app.get("/v1/environments/{env_id}/work")
    def list_work(c: Who, env_id: str, limit: int | None = None, page: str | None = None) -> JSONResponse:
        return JSONResponse(work.list_work(c, env_id, limit, page))

    @app.get("/v1/environments/{env_id}/work/{work_id}")
    def retrieve(c: Who, env_id: str, work_id: str) -> JSONResponse:
        return JSONResponse(work.retrieve(c, env_id, work_id))

    @app.post("/v1/environments/{env_id}/work/{work_id}/ack")
    def ack(c: Who, env_id: str, work_id: str) -> JSONResponse:
        return JSONResponse(work.ack(c, env_id, work_id))

    @app.post("/v1/environments/{env_id}/work/{work_id}/heartbeat")
    def heartbeat(
        c: Who,
        env_id: str,
        work_id: str,
        expected_last_heartbeat: str | None = None,
        desired_ttl_seconds: int | None = None,
    ) -> JSONResponse:
        return JSONResponse(work.heartbeat(c, env_id, work_id, expected_last_heartbeat, desired_ttl_seconds))

    @app.post("/v1/environments/{env_id}/work/{work_id}/stop")
    def stop(c: Who, env_id: str, work_id: str, raw: Body) -> JSONResponse:
        data = parse_json_object(raw) if raw.strip() else {}
        force = data.get("force", False)
        if not isinstance(force, bool):
            raise invalid("force must be a boolean")
        return JSONResponse(work.stop(c, env_id, work_id, force))

    # --- sessions: the view workers read, and the event stream ---------------------------------------------

    def session_for(c: Caller, session_id: str) -> dict[str, Any]:
        if not envs.may_read_session(c, session_id):
            raise not_found(f"session {session_id!r} not found")
        view = access.get_session(Principal("api_actor", access.admin_key_id), session_id)
        status, last_change = events.status_and_last_change(session_id)
        with envs.db.read_one() as tx:
            environment_id = tx.environment_of_session(session_id)
        return session_object(view, environment_id=environment_id, status=status, last_change=last_change)

    @app.get("/v1/sessions/{session_id}")
    def get_session(c: Who, session_id: str) -> JSONResponse:
        return JSONResponse(session_for(c, session_id))

    @app.get("/v1/sessions/{session_id}/events")
    def list_events(
        c: Who, session_id: str, limit: int | None = None, page: str | None = None
    ) -> JSONResponse:
        session_for(c, session_id)
        return JSONResponse(events.page(session_id, limit, page))

    @app.post("/v1/sessions/{session_id}/events")
    def post_events(c: Who, session_id: str, raw: Body) -> JSONResponse:
        session_for(c, session_id)
        posted = check_posted(parse_json_object(raw).get("events"), agent_side=c.kind == "admin")
        return JSONResponse({"data": events.post(session_id, posted)})

    @app.get("/v1/sessions/{session_id}/events/stream")
    async def stream(c: Who, session_id: str, request: Request) -> StreamingResponse:
        await asyncio.to_thread(session_for, c, session_id)
        start = await asyncio.to_thread(events.last_seq, session_id)
        return StreamingResponse(_frames(events, session_id, start), media_type="text/event-stream")


async def _frames(events: SessionEvents, session_id: str, after_seq: int) -> AsyncIterator[bytes]:
    """Server-sent events: every event appended after the stream opened, as ``event: <type>`` + ``data``
    frames; a ``ping`` frame when nothing happened for a while."""
    entry = events.notifier.subscribe(session_id)
    _, woken = entry
    quiet = 0.0
    try:
        while True:
            woken.clear()
            for seq, body in await asyncio.to_thread(events.since, session_id, after_seq):
                after_seq = seq
                yield f"event: {body['type']}\ndata: {json.dumps(body)}\n\n".encode()
            try:
                await asyncio.wait_for(woken.wait(), RECHECK_S)
                quiet = 0.0
            except TimeoutError:
                quiet += RECHECK_S
                if quiet >= PING_EVERY_S:
                    quiet = 0.0
                    yield b'event: ping\ndata: {"type": "ping"}\n\n'
    finally:
        events.notifier.unsubscribe(session_id, entry)
