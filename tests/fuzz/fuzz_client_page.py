"""The store client's reading of listing pages (client/core.py, client/memories.py, client/errors.py,
client/retry.py): whatever a server answers, a listing call returns a page or raises a ``StoreError``, never a
credential, and a walk over pages always ends.

The client's real ``StoreClient``, over a transport that answers what the input says (any status, body and
``Retry-After``/``retry-after-ms``/``x-should-retry`` headers): ``list_memories_page`` returns a ``Page`` (a
2xx whose body is one) or raises only a ``StoreError`` of the class its status documents (a 2xx that is not
a page: ``InvalidResponse``), whose message never holds the client's API key, even when the server echoes
it; it sends at most 1 + ``max_retries`` requests and never waits longer than 60 s before one. A page the
server renders (any memories and prefixes, any cursor) is read back equal. ``list_memories``, following
``next_page`` over any sequence of answers, ends: it never follows a cursor it has followed before. Any body
of a session (``get_session``, where a mount reads its stores) is a ``Session`` or ``InvalidResponse``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
from harness import Provider, holds, one_of, pick

from memsync.api.models import Memory, MemoryPrefix
from memsync.client import StoreClient
from memsync.client import errors as store_errors

KEY = "sk-ant-api03-fuzz-SECRET-key"
SHA = "0" * 64
LOOP = asyncio.new_event_loop()
T = TypeVar("T")
STATUSES = (200, 201, 204, 304, 400, 401, 403, 404, 408, 409, 412, 413, 429, 500, 502, 503, 529, 302, 418)
HEADER_NAMES = ("retry-after", "retry-after-ms", "x-should-retry", "request-id", "content-type", "etag")
HEADER_VALUES = (
    "1",
    "0",
    "-1",
    "61",
    "1e309",
    "nan",
    "true",
    "false",
    "Wed, 21 Oct 2015 07:28:00 GMT",
    KEY,
    "",
)
BODIES = (
    b'{"data": [], "next_page": null}',
    b'{"type": "error", "error": {"type": "not_found_error", "message": "no"}, "request_id": "req_1"}',
    b'{"type": "error", "error": {"type": "memory_path_conflict_error", "conflicting_path": "/a"}}',
    b"<html>bad gateway</html>",
    b"",
)
CLASSES: dict[int, type[store_errors.StoreError]] = {
    400: store_errors.BadRequest,
    401: store_errors.AuthenticationFailed,
    403: store_errors.PermissionDenied,
    404: store_errors.NotFound,
    409: store_errors.Conflict,
    412: store_errors.PreconditionFailed,
    413: store_errors.RequestTooLarge,
    429: store_errors.RateLimited,
}


class WalkDoesNotEnd(Exception):
    pass


def memory(fdp: Provider, i: int) -> dict[str, Any]:
    return Memory(
        id=f"mem_{i}",
        memory_store_id="memstore_a",
        path="/" + fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 30)),
        content=fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 30)) if fdp.ConsumeBool() else None,
        content_sha256=SHA,
        content_size_bytes=fdp.ConsumeIntInRange(0, 102_400),
        memory_version_id=f"memver_{i}",
        created_at="2026-01-31T12:00:00Z",  # type: ignore[arg-type]
        updated_at="2026-01-31T12:00:00.123456Z",  # type: ignore[arg-type]
    ).model_dump(mode="json")


def page_body(fdp: Provider) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for i in range(fdp.ConsumeIntInRange(0, 5)):
        if fdp.ConsumeBool():
            items.append(memory(fdp, i))
        else:
            items.append({"type": "memory_prefix", "path": "/" + fdp.ConsumeUnicodeNoSurrogates(8) + "/"})
    cursor = (
        "page_" + fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 20)) if fdp.ConsumeBool() else None
    )
    return {"data": items, "next_page": cursor}


class Server:
    """A scripted server: answers the ``responses`` in turn, again and again (as a server may), and keeps
    what it was sent and how long the client waited between attempts."""

    def __init__(self, responses: list[httpx.Response]) -> None:
        self.responses = responses
        self.sent: list[httpx.Request] = []
        self.waits: list[float] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        if len(self.sent) > 40:
            raise WalkDoesNotEnd
        return self.last

    @property
    def last(self) -> httpx.Response:
        return self.responses[(len(self.sent) - 1) % len(self.responses)]

    def client(self) -> StoreClient:
        async def sleep(seconds: float) -> None:
            self.waits.append(seconds)

        transport = httpx.MockTransport(self.answer)
        return StoreClient("http://store.test", api_key=KEY, transport=transport, sleep=sleep)

    def call(self, request: Callable[[StoreClient], Awaitable[T]]) -> T:
        store = self.client()
        try:
            return LOOP.run_until_complete(request(store))
        finally:
            LOOP.run_until_complete(store.aclose())


def any_response(fdp: Provider) -> httpx.Response:
    status = pick(fdp, STATUSES) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(100, 599)
    headers = [
        (pick(fdp, HEADER_NAMES), pick(fdp, HEADER_VALUES) if fdp.ConsumeBool() else fdp.ConsumeUnicode(12))
        for _ in range(fdp.ConsumeIntInRange(0, 3))
    ]
    body = pick(fdp, BODIES) if fdp.ConsumeBool() else fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 400))
    if fdp.ConsumeBool():
        body += KEY.encode()
    raw = [
        (k.encode("ascii"), v.encode("utf-8", "surrogatepass")) for k, v in headers
    ]  # bytes, as on the wire
    return httpx.Response(status, headers=raw, content=body)


def check_one_call(fdp: Provider) -> None:
    server = Server([any_response(fdp) for _ in range(fdp.ConsumeIntInRange(1, 4))])
    try:
        page = server.call(lambda store: store.list_memories_page("memstore_a"))
    except store_errors.StoreError as exc:
        holds(KEY not in str(exc) and KEY not in repr(exc), f"{exc!r} shows the API key")
        holds(exc.status == server.last.status_code, f"{exc!r} for a {server.last.status_code}")
        expected = CLASSES.get(
            exc.status, store_errors.ServerError if exc.status >= 500 else store_errors.StoreError
        )
        if 200 <= exc.status < 300:
            expected = store_errors.InvalidResponse
        elif exc.status in (409, 412) and exc.error_type == "memory_path_conflict_error":
            expected = store_errors.PathConflict  # the error type names the conflict, whatever the status
        holds(isinstance(exc, expected), f"{exc!r} for a {exc.status} is not a {expected.__name__}")
    else:
        holds(200 <= server.last.status_code < 300, f"a page from {server.responses}")
        holds(all(isinstance(i, Memory | MemoryPrefix) for i in page.data), f"page items {page.data}")
    holds(len(server.sent) <= 1 + 2, f"{len(server.sent)} requests for one call (2 retries at most)")
    holds(all(0 <= w <= 60 for w in server.waits), f"waited {server.waits} between attempts")


def check_page_round_trip(fdp: Provider) -> None:
    body = page_body(fdp)
    page = Server([httpx.Response(200, json=body)]).call(lambda store: store.list_memories_page("memstore_a"))
    back = json.loads(page.model_dump_json())
    holds(back == json.loads(json.dumps(body)), f"{body} was read as {back}")


def check_walk(fdp: Provider) -> None:
    cursors = [None, "page_a", "page_b", "page_c", ""]
    answers = [
        httpx.Response(200, json={"data": [], "next_page": pick(fdp, cursors)})
        for _ in range(fdp.ConsumeIntInRange(1, 6))
    ]

    async def walk(store: StoreClient) -> None:
        async for _ in store.list_memories("memstore_a"):
            pass

    try:
        Server(answers).call(walk)
    except store_errors.InvalidResponse:
        pass
    except WalkDoesNotEnd:
        pages = [r.json()["next_page"] for r in answers]
        holds(False, f"a walk over answers with next_page {pages} does not end")


def check_session(fdp: Provider) -> None:
    """The session a mount reads its stores from: any 200 body is a ``Session`` or ``InvalidResponse``."""
    body = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8000))
    try:
        session = Server([httpx.Response(200, content=body)]).call(lambda store: store.get_session("sesn_a"))
    except store_errors.InvalidResponse:
        return
    holds(all(r.type == "memory_store" for r in session.resources), f"{body!r} gave {session}")


def test_one_input(data: bytes) -> None:
    one_of(data, check_one_call, check_page_round_trip, check_walk, check_session)
