"""The app's HTTP edge without a socket: the request-id middleware and its error envelope."""

from __future__ import annotations

from typing import Any

import httpx

from memsync.server.http.envelope import MAX_BODY_BYTES, RequestIdMiddleware


async def _boom(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("a bug")


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def test_unhandled_error_is_a_500_envelope_with_a_request_id() -> None:
    transport = httpx.ASGITransport(app=RequestIdMiddleware(_boom))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        resp = await http.get("/anything")
    assert resp.status_code == 500
    body = resp.json()
    assert body["error"] == {"type": "api_error", "message": "internal server error"}
    assert body["request_id"] == resp.headers["request-id"]
    assert "a bug" not in resp.text


async def test_every_response_gets_a_fresh_request_id() -> None:
    transport = httpx.ASGITransport(app=RequestIdMiddleware(_ok))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        first, second = await http.get("/"), await http.get("/")
    assert first.text == "ok"
    assert first.headers["request-id"].startswith("req_")
    assert first.headers["request-id"] != second.headers["request-id"]


async def test_declared_oversized_body_is_refused_unread() -> None:
    transport = httpx.ASGITransport(app=RequestIdMiddleware(_ok))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        resp = await http.post("/", content=b"x" * (MAX_BODY_BYTES + 1))
    assert resp.status_code == 413
    assert resp.json()["error"]["type"] == "request_too_large"
