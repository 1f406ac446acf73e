"""Routes of a session as the environment extension serves it: the session object workers read, and its
event stream (list, post, follow as server-sent events)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from memsync.server.bodies import parse_body
from memsync.server.environments.events import PostEventsRequest, SessionEvents, check_posted
from memsync.server.environments.extension import EnvironmentExtension
from memsync.server.http.deps import Body, EnvironmentCaller
from memsync.server.http.envelope import JSONResponse
from memsync.server.http.openapi import SdkModel, documented

_EVENTS = "anthropic.types.beta.sessions"
PING_EVERY_S = 15.0
RECHECK_S = 1.0  # a stream re-reads its session this often (another replica may have appended events)


def router(extension: EnvironmentExtension) -> APIRouter:
    router = APIRouter()
    events = extension.events

    @router.get(
        "/v1/sessions/{session_id}",
        **documented(
            ok=SdkModel("anthropic.types.beta", "BetaManagedAgentsSession"),
            errors=(403, 404),
            summary="Get a session",
        ),
    )
    def get_session(c: EnvironmentCaller, session_id: str) -> JSONResponse:
        return JSONResponse(extension.session(c, session_id))

    @router.get(
        "/v1/sessions/{session_id}/events",
        **documented(
            ok=SdkModel(_EVENTS, "BetaManagedAgentsSessionEvent", page=True),
            errors=(403, 404),
            summary="List a session's events",
        ),
    )
    def list_events(
        c: EnvironmentCaller, session_id: str, limit: int | None = None, page: str | None = None
    ) -> JSONResponse:
        extension.session(c, session_id)
        return JSONResponse(events.page(session_id, limit, page))

    @router.post(
        "/v1/sessions/{session_id}/events",
        **documented(
            ok=SdkModel(_EVENTS, "BetaManagedAgentsSendSessionEvents"),
            body=PostEventsRequest,
            errors=(403, 404, 409, 413),
            summary="Send events to a session",
        ),
    )
    def post_events(c: EnvironmentCaller, session_id: str, raw: Body) -> JSONResponse:
        extension.session(c, session_id)
        posted = check_posted(parse_body(PostEventsRequest, raw).events, agent_side=c.kind == "admin")
        return JSONResponse({"data": events.post(session_id, posted)})

    @router.get(
        "/v1/sessions/{session_id}/events/stream",
        **documented(
            errors=(403, 404),
            summary="Follow a session's events (server-sent events)",
            extra={
                200: {
                    "description": "Server-sent events: one `event: <type>` frame per event, `ping` "
                    "frames while quiet.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                }
            },
        ),
    )
    async def stream(c: EnvironmentCaller, session_id: str, request: Request) -> StreamingResponse:
        await asyncio.to_thread(extension.session, c, session_id)
        start = await asyncio.to_thread(events.last_seq, session_id)
        return StreamingResponse(_frames(events, session_id, start), media_type="text/event-stream")

    return router


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
