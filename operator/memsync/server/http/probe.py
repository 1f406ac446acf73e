"""The sync sidecar's conditional probe, answered without the framework's per-request work.

Every sidecar asks every store, every interval, ``GET /v1/memory_stores/{id}/memories?view=basic&limit=1``
with ``If-None-Match`` (``StoreClient.probe_memories``); almost always the answer is a bodiless 304. Routing
that request through FastAPI (route matching over every route, dependency resolution, query and header
validation) cost more than the answer itself (a profile of the 304 path: about 60 % of the server's CPU per
request). This middleware recognises exactly that request (GET, that path, ``If-None-Match``, no query
parameter but ``beta``, a plain ``limit`` and a known ``view``) and answers it with the same service call the
route makes (``StoreService.list_memories``: the same checks, the same ETag, a full page when the ETag is
stale), authenticating the caller in the same threadpool hop when its credential is not cached. Anything
else, or any doubt, goes the ordinary way.

Where the database can read without waiting (``Database.read_now``), the unchanged case is decided on the
event loop itself: on SQLite in WAL mode the credential, when not cached, is an indexed statement of tens of
microseconds, and the store's change marker too unless nothing was committed since this process last read
it (``storage.sqlite_changes``: then it comes from memory); on PostgreSQL the marker comes from the
process's memory (``storage.change_cache``) when it is there, and the credential from its cache. Under load
the threadpool hop, not the work, was most of a probe's cost on SQLite (every worker thread must win the GIL
back from the busy event loop after its statement), and the round trip most of it on PostgreSQL. A changed
listing, a busy database or anything not at hand takes the threadpool as before.

When the answer is at hand (the credential cached, the page unchanged by a read that does not wait), the
HTTP protocol answers the probe itself as soon as its headers are in (``ProbeAnswers.answer_now``, called by
``server.protocol``), without an ASGI task: the task, the middleware chain every request crosses and the
messages of an ASGI answer cost a probe more than its own work (measured: the probe at 40 % of ``/healthz``'s
rate through them). It is counted, timed and logged as the middleware would (``observe.record``); anything
else, and any doubt, goes to the app.

A credential that is not cached (its cache entry expired) is looked up once per process however many probes
carrying it arrive meanwhile: the first takes the threadpool to read it, the others wait for that answer on
the event loop without a thread (a session's three stores are probed at the same moment with one token; a
busy token's expiry would otherwise send every probe in flight to the database at once). Only where the
database cannot read on the event loop (PostgreSQL): on SQLite the lookup is an indexed statement on the
loop, cheaper than any waiting. There a credential in use is also read again in the background once half
of its time in the cache has passed, while the cached answer is still served (never past its time), so a
busy credential's probes never wait for the database at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, ClassVar, Final, NamedTuple, get_args
from urllib.parse import parse_qsl

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute

from memsync.api.models import View
from memsync.server.access import AccessService, Principal
from memsync.server.errors import ApiError
from memsync.server.http.envelope import error_response, new_request_id
from memsync.server.http.memories import listing_response, not_modified, send_not_modified
from memsync.server.http.observe import record
from memsync.server.storage.database import WouldWait
from memsync.server.stores.service import StoreService

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("memsync.server")

LISTING: Final = "/v1/memory_stores/{store_id}/memories"
# Only an id (the id rule's characters) is answered here; anything else takes the route, which refuses it.
_PATH: Final = re.compile(r"/v1/memory_stores/([A-Za-z0-9_-]+)/memories")
_ALLOWED_PARAMS: Final = frozenset({"beta", "limit", "view"})
_VIEWS: Final = frozenset(get_args(View))


Credential = tuple[str | None, str | None]  # the x-api-key and Authorization headers


class Probe(NamedTuple):
    store_id: str
    view: str | None
    limit: int | None
    if_none_match: str
    x_api_key: str | None
    authorization: str | None
    forwarded: bool = False  # a proxy's headers are on it (``answer_now`` leaves it to the app)


class Judged(NamedTuple):
    """What ``answer_now`` found out about a probe it left to the app, for ``ProbeMiddleware`` to go on
    from (kept in the request's scope): the probe, and its caller when that was at hand (then its page was
    found changed, or not without waiting)."""

    probe: Probe | None
    caller: Principal | None


_JUDGED: Final = "memsync.probe"  # the scope's key for a ``Judged``


def query_params(raw: bytes) -> dict[str, str] | None:
    """The query string's parameters as ``parse_qsl(..., keep_blank_values=True)`` reads them; None when a
    name is given twice. The probe's query has nothing to decode (``view=basic&limit=1&beta=true``): it is
    split as it is, at a fraction of ``parse_qsl``'s cost; one with an escape (``%``, ``+``) is read by
    ``parse_qsl`` itself."""
    text = raw.decode("latin-1")
    pairs = (
        parse_qsl(text, keep_blank_values=True)
        if "%" in text or "+" in text
        else [part.partition("=")[::2] for part in text.split("&") if part]
    )
    given: dict[str, str] = {}
    for name, value in pairs:
        if name in given:
            return None
        given[name] = value
    return given


def may_be_probe(path: str) -> bool:
    """A cheap first look: only a path like the listing's can be the probe (``probe_request`` decides)."""
    return path.endswith("/memories") and path.startswith("/v1/memory_stores/")


def probe_request(scope: Scope) -> Probe | None:
    """The plain conditional probe's parts, or None for any other request."""
    if scope.get("method") != "GET":
        return None
    match = _PATH.fullmatch(scope.get("path", ""))
    if match is None or "%" in match.group(1):
        return None
    listed = scope.get("headers", [])
    headers: dict[bytes, bytes] = dict(listed)
    if len(headers) != len(listed):
        return None  # a repeated header: let the framework decide what it means
    if_none_match = headers.get(b"if-none-match")
    if not if_none_match:
        return None
    given = query_params(scope.get("query_string", b""))
    if given is None or not given.keys() <= _ALLOWED_PARAMS:
        return None
    limit_text, view = given.get("limit"), given.get("view")
    if limit_text is not None and not (limit_text.isascii() and limit_text.isdigit() and len(limit_text) < 6):
        return None
    if view is not None and view not in _VIEWS:
        return None
    key, auth = headers.get(b"x-api-key"), headers.get(b"authorization")
    return Probe(
        match.group(1),
        view,
        int(limit_text) if limit_text is not None else None,
        if_none_match.decode("latin-1"),
        key.decode("latin-1") if key is not None else None,
        auth.decode("latin-1") if auth is not None else None,
        # uvicorn's proxy-headers middleware may change the client the access log names
        b"x-forwarded-for" in headers or b"x-forwarded-proto" in headers,
    )


def listing_route(router: APIRouter) -> BaseRoute:
    """The listing's GET route of the memories router (the access log and metrics name its template)."""
    for route in router.routes:
        if getattr(route, "path", None) == LISTING and "GET" in (getattr(route, "methods", None) or ()):
            return route
    raise LookupError(f"no GET route {LISTING}")


class ProbeAnswers:
    """The probe's answers, for ``ProbeMiddleware`` (every probe that reaches the app) and for the HTTP
    protocol (a probe whose answer is at hand, ``answer_now``), with the credential lookups and refreshes
    under way (memory only). One per app; the protocol finds it by the event loop the app serves on
    (``on``)."""

    _serving: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ProbeAnswers]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(
        self, *, route: BaseRoute, service: StoreService, access: AccessService, access_logs: bool
    ) -> None:
        self.route = route
        self.service = service
        self.access = access
        self.access_logs = access_logs
        self._lookups: dict[Credential, tuple[asyncio.Future[Principal], int]] = {}
        self._refreshing: dict[Credential, asyncio.Future[None]] = {}

    def serve_on(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Let the HTTP protocol of ``loop`` answer probes from here (None: no longer)."""
        if loop is not None:
            current = self._serving.get(loop)
            if current is not None and current is not self:
                raise RuntimeError("another store app already serves on this event loop")
            self._serving[loop] = self
        else:
            for serving, answers in list(self._serving.items()):
                if answers is self:
                    del self._serving[serving]

    @classmethod
    def on(cls, loop: asyncio.AbstractEventLoop) -> ProbeAnswers | None:
        return cls._serving.get(loop)

    def caller_now(self, probe: Probe) -> Principal | None:
        """The probe's caller without waiting: its credential cached (one due to be read again is read in
        the background meanwhile, on PostgreSQL), or read on the event loop where the database lets it
        (SQLite; None when the database is busy); None otherwise. Raises ``ApiError`` (401)."""
        caller, due = self.access.cached_and_due(probe.x_api_key, probe.authorization)
        if caller is not None:
            if due and not self.service.db.read_now_runs_statements:
                self._refresh(probe.x_api_key, probe.authorization)
            return caller
        if self.service.db.read_now_runs_statements:
            with contextlib.suppress(WouldWait):
                return self.access.authenticate_now(probe.x_api_key, probe.authorization)
        return None

    def unchanged_now(self, caller: Principal, probe: Probe) -> str | None:
        """The ETag of a 304 when the database says at once that the page is unchanged; None when it
        changed or the database would wait. Raises the listing's ``ApiError``."""
        if not self.service.db.reads_without_waiting:
            return None
        try:  # on the event loop: statements that cannot wait, no thread hop
            return self.service.first_page_unchanged(
                caller, probe.store_id, view=probe.view, limit=probe.limit, if_none_match=probe.if_none_match
            )
        except WouldWait:
            return None

    def answer_now(self, scope: Scope, default_headers: list[tuple[bytes, bytes]]) -> bytes | None:
        """The whole HTTP/1.1 answer to a probe whose answer is at hand (its credential cached, its page
        unchanged: a 304), counted, timed and logged as ``ObserveMiddleware`` would; None for any other
        request, or any doubt (an error included), which then goes the ordinary way. Called by the HTTP
        protocol when the request's headers are in, instead of starting its ASGI task. What it found out about
        a probe it leaves to the app stays in the scope (``Judged``), so the middleware does not ask again."""
        began = time.perf_counter()
        probe = probe_request(scope)
        if probe is None or probe.forwarded:
            scope[_JUDGED] = Judged(probe, None)
            return None
        try:
            caller = self.caller_now(probe)
            etag = self.unchanged_now(caller, probe) if caller is not None else None
        except ApiError:  # the app asks again, and answers it
            return None
        if etag is None:
            scope[_JUDGED] = Judged(probe, caller)
            return None
        request_id = new_request_id()
        scope["route"] = self.route
        scope.setdefault("state", {})["request_id"] = request_id
        answer = not_modified(default_headers, etag, request_id)
        record(scope, 304, time.perf_counter() - began, access_logs=self.access_logs)
        return answer

    def _refresh(self, x_api_key: str | None, authorization: str | None) -> None:
        """Read a cached credential that is due again in the background, once per process, so the probes
        that carry it never find it missing."""
        key = (x_api_key, authorization)
        if key in self._refreshing:
            return
        task = self._refreshing[key] = asyncio.ensure_future(
            run_in_threadpool(self.access.refresh, x_api_key, authorization)
        )
        task.add_done_callback(lambda done: self._refreshed(key, done))

    def _refreshed(self, key: Credential, done: asyncio.Future[None]) -> None:
        self._refreshing.pop(key, None)
        err = None if done.cancelled() else done.exception()
        if err is not None:  # the entry expires as it would have; the next probe looks it up and says why
            logger.warning(
                "could not read a credential again ahead of its expiry", extra={"error": repr(err)}
            )

    async def authenticate_once(self, x_api_key: str | None, authorization: str | None) -> Principal:
        """``AccessService.authenticate`` in the threadpool, shared by every probe with the same credential
        that arrives while it runs; its ``ApiError`` (401) is every one's. A probe that arrives after a
        revocation in this process (the cache's generation moved) does not join a lookup begun before it:
        that lookup may have read the credential as still current."""
        key = (x_api_key, authorization)
        generation = self.access.cache.generation
        pending = self._lookups.get(key)
        lookup: asyncio.Future[Principal]
        if pending is None or pending[1] != generation:
            lookup = asyncio.ensure_future(
                run_in_threadpool(self.access.authenticate, x_api_key, authorization)
            )
            self._lookups[key] = (lookup, generation)
            lookup.add_done_callback(lambda done: self._looked_up(key, done))
        else:
            lookup = pending[0]
        return await asyncio.shield(lookup)  # a caller that goes away does not cancel the others' answer

    def _looked_up(self, key: Credential, done: asyncio.Future[Principal]) -> None:
        if self._lookups.get(key, (None, 0))[0] is done:  # not a newer lookup for the same credential
            del self._lookups[key]
        if not done.cancelled():
            done.exception()  # retrieved here too: every caller may have gone before it ended


class ProbeMiddleware:
    """Answers the plain conditional probe directly; passes everything else on."""

    def __init__(self, app: ASGIApp, *, answers: ProbeAnswers) -> None:
        self.app = app
        self.answers = answers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        judged: Judged | None = scope.pop(_JUDGED, None)  # the HTTP protocol's findings, when it looked
        if judged is not None:
            probe = judged.probe
        else:
            probe = probe_request(scope) if scope["type"] == "http" else None
        if probe is None:
            await self.app(scope, receive, send)
            return
        answers = self.answers
        scope["route"] = answers.route  # the access log and the metrics name the route template, as ever
        try:
            if judged is not None and judged.caller is not None:
                caller: Principal | None = judged.caller
                unchanged = None  # just found changed, or not without waiting: the threadpool reads it
            else:
                caller = answers.caller_now(probe)
                if caller is None and not answers.service.db.read_now_runs_statements:
                    caller = await answers.authenticate_once(probe.x_api_key, probe.authorization)
                unchanged = answers.unchanged_now(caller, probe) if caller is not None else None
            if unchanged is not None:
                await send_not_modified(send, unchanged)
                return
        except ApiError as err:
            await error_response(err, scope.get("state", {}).get("request_id"))(scope, receive, send)
            return

        def answer() -> tuple[dict[str, Any] | None, str]:
            who = (
                caller
                if caller is not None
                else answers.access.authenticate(probe.x_api_key, probe.authorization)
            )
            return answers.service.list_memories(
                who,
                probe.store_id,
                view=probe.view,
                limit=probe.limit,
                page=None,
                path_prefix=None,
                depth=None,
                if_none_match=probe.if_none_match,
            )

        response: Response
        try:
            body, etag = await run_in_threadpool(answer)
        except ApiError as err:
            response = error_response(err, scope.get("state", {}).get("request_id"))
        else:
            response = listing_response(body, etag)
        await response(scope, receive, send)
