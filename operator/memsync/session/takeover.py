"""The runner's side of the lease handover (``memsync.contracts.lease``): an HTTP transport under the SDK.

The SDK's per-item worker always starts its heartbeats with ``NO_HEARTBEAT``. While the operator holds the
item, that first heartbeat is refused with 412; this transport then sends it again with the operator's
``last_heartbeat`` from the refusal, so the SDK sees a first heartbeat that succeeded and goes on chaining
from the value it answered. Only the first heartbeat of the Pod's own work item is ever retried; every
other request passes through untouched.
"""

from __future__ import annotations

import json
import logging

import anthropic
import httpx2

from memsync.contracts import lease

logger = logging.getLogger("memsync.session")


def _is_first_heartbeat(request: httpx2.Request, work_id: str) -> bool:
    return (
        request.method == "POST"
        and request.url.path.endswith(f"/work/{work_id}{lease.HEARTBEAT_SUFFIX}")
        and request.url.params.get(lease.EXPECTED_PARAM) == lease.NO_HEARTBEAT
    )


async def _buffered(response: httpx2.Response, request: httpx2.Request) -> tuple[httpx2.Response, object]:
    """The response with its body read into memory (returned unread to the caller) and its JSON (None)."""
    raw = b"".join([chunk async for chunk in response.stream])  # type: ignore[union-attr]
    await response.aclose()
    probe = httpx2.Response(response.status_code, headers=response.headers, stream=httpx2.ByteStream(raw))
    await probe.aread()
    try:
        body: object = json.loads(probe.text)
    except ValueError:
        body = None
    fresh = httpx2.Response(
        response.status_code,
        headers=response.headers,
        stream=httpx2.ByteStream(raw),
        request=request,
        extensions=response.extensions,
    )
    return fresh, body


class TakeoverTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, work_id: str) -> None:
        self.inner = inner
        self.work_id = work_id
        self.took_over = False  # a heartbeat of the item succeeded: no more takeovers
        self.takeovers = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.took_over or not _is_first_heartbeat(request, self.work_id):
            return await self.inner.handle_async_request(request)
        response = await self.inner.handle_async_request(request)
        for _ in range(lease.TAKEOVER_ATTEMPTS):
            if response.status_code != 412:
                break
            response, body = await _buffered(response, request)
            value = lease.takeover_value(lease.refused_state(body))
            if value is None:
                break
            logger.info(
                "taking the work item's lease over from the operator", extra={"work_id": self.work_id}
            )
            request = httpx2.Request(
                request.method,
                request.url.copy_set_param(lease.EXPECTED_PARAM, value),
                headers=request.headers,
                extensions=request.extensions,
            )
            response = await self.inner.handle_async_request(request)
            self.takeovers += 1
        if 200 <= response.status_code < 300:
            self.took_over = True
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def runner_http_client(work_id: str) -> httpx2.AsyncClient:
    """The SDK client's HTTP client for the runner: the SDK's defaults over the takeover transport."""
    transport = TakeoverTransport(httpx2.AsyncHTTPTransport(), work_id)
    client: httpx2.AsyncClient = anthropic.DefaultAsyncHttpxClient(transport=transport)
    return client
