"""The store server's HTTP envelope: request ids, the body-size cap, JSON rendering and the error envelope.

Every answer, an error included, carries a ``request-id`` header; every error is the API's JSON envelope
(``{"type": "error", "error": {...}, "request_id": ...}``), whatever raised it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as _StdJSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from memsync.api import errors as et
from memsync.server.errors import ApiError, too_large

logger = logging.getLogger("memsync.server")

MAX_BODY_BYTES = 1024 * 1024  # a content field holds at most 100 kB; anything far larger is refused unread

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class JSONResponse(_StdJSONResponse):
    """JSON rendered by orjson: the same compact UTF-8 bytes as the standard renderer, about ten times
    faster on a 100-memory page (measured: 1.1 ms -> 0.08 ms), which is a third of such a request's CPU."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def new_request_id() -> str:
    """A request's id for logs and the ``request-id`` header: unique, not a secret (no system call)."""
    return f"req_{random.getrandbits(96):024x}"


def header_lines(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Header fields as an HTTP/1.1 answer writes them, ``name: value\r\n`` each (for the answers the HTTP
    protocol writes itself: a refusal, a probe's 304)."""
    return b"".join([name + b": " + value + b"\r\n" for name, value in headers])


class RequestIdMiddleware:
    """Gives every request a ``req_...`` id (``request.state.request_id``) and every response a ``request-id``
    header; refuses a declared Content-Length above the cap before the body is read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        header = (b"request-id", request_id.encode("ascii"))

        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > MAX_BODY_BYTES:
                    err = too_large(
                        f"request body is {declared} bytes; at most {MAX_BODY_BYTES} bytes are accepted"
                    )
                    response = error_response(err, request_id)
                    await response(scope, receive, send_with_id)
                    return
        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:
            # The client went away before its body arrived: nobody to answer, nothing went wrong here.
            logger.info(
                "client disconnected before its request body arrived",
                extra={"path": scope.get("path"), "request_id": request_id},
            )
        except Exception:
            # Reached only by errors outside the routes' own handlers; still answer in the envelope.
            logger.exception("unhandled error", extra={"path": scope.get("path"), "request_id": request_id})
            if started:
                raise
            response = error_response(ApiError(500, et.API_ERROR, "internal server error"), request_id)
            await response(scope, receive, send_with_id)


def request_id_of(request: Request) -> str | None:
    rid: str | None = getattr(request.state, "request_id", None)
    return rid


def error_response(err: ApiError, request_id: str | None) -> JSONResponse:
    return JSONResponse(err.body(request_id), status_code=err.status, headers=err.headers)


def scope_error_response(err: ApiError, scope: Scope) -> JSONResponse:
    """The error envelope for a raw ASGI request (in a middleware, before any route)."""
    return error_response(err, scope.get("state", {}).get("request_id"))


async def read_body(request: Request) -> bytes:
    """The raw request body, refused with 413 once it grows past the cap (chunked bodies included)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large(f"request body exceeds {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _status_type(status: int) -> str:
    for error_type, code in et.STATUS_OF.items():
        if code == status and error_type not in (et.PRECONDITION_FAILED, et.PATH_CONFLICT):
            return error_type
    return et.API_ERROR if status >= 500 else et.INVALID_REQUEST


def _describe_request_validation(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ())]
        where, name = (loc[0], ".".join(loc[1:])) if len(loc) > 1 else ("request", ".".join(loc))
        parts.append(f"{where} parameter {name!r}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Every error the app raises, its own or the framework's, answered in the envelope."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc, request_id_of(request))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = ApiError(400, et.INVALID_REQUEST, _describe_request_validation(exc))
        return error_response(err, request_id_of(request))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        err = ApiError(exc.status_code, _status_type(exc.status_code), message)
        return error_response(err, request_id_of(request))
