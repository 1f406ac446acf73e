"""The store server's HTTP/1.1 connections: uvicorn's httptools (or h11) protocol, with a read deadline and
(httptools) the event-loop lag's refusals.

uvicorn closes idle keep-alive connections, but nothing bounds how long a request may take to *arrive*: a
client that connects and sends nothing, or half its headers, or half its body, holds a connection (and,
mid-body, a request task) forever. Here every request must arrive in full, headers and body, within
``read_timeout_s`` of its first byte (of the connection being opened, for the first request); otherwise the
connection is closed and one INFO line says so. Time the application spends on a request that has fully
arrived is not counted.

On httptools, every read tells the loop's monitor (``http.loop_lag``) that a turn of the loop is reading, and
a request whose headers are read when the event loop, busy for a while, would start it more than
``max_loop_lag_s`` late (a tenth of that while an overload stands), counting how long it may have waited
unread and the requests started ahead of it in the same turn, is answered 503 right here, instead of starting
its ASGI task (unless refusing has taken the loop longer than serving since its last tick): the cheapest
answer the process can give, which is what lets it refuse a crowd faster than the crowd arrives. A whole
bodiless GET arriving in one read on a connection at rest (the sidecars' probe) is judged even earlier, before
it is parsed, and its connection is then not read again until the loop's next tick (``LoopLag.hold``). A
sidecar's probe whose answer is at hand (a 304: its credential cached, its page unchanged) is answered here
too, without an ASGI task (``http.probe``). The pure-Python h11 protocol (``--http h11``, a fallback) does
neither.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from memsync.api.constants import SERVER_IDLE_KEEPALIVE_S
from memsync.server.accept import LOOP_FACTORY
from memsync.server.http.loop_lag import DEFAULT_MAX_LAG_S, LoopLag, refusal, unparsed_path
from memsync.server.http.probe import ProbeAnswers, Scope, may_be_probe

logger = logging.getLogger("memsync.server")

DEFAULT_READ_TIMEOUT_S = 15.0
_READING = (h11.IDLE, h11.SEND_BODY)  # the client's side of a request that has not fully arrived


class _ReadDeadline:
    """The deadline logic shared by both HTTP/1.1 implementations; ``_reading()`` says whether the client's
    current request has not fully arrived."""

    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_loop_lag_s: float = DEFAULT_MAX_LAG_S  # refusals by lag: the httptools protocol's alone
    _read_deadline: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: tuple[str, int] | None

    def _reading(self) -> bool:
        raise NotImplementedError

    def _what_arrived(self) -> str:
        raise NotImplementedError

    # the protocol's own hooks, wrapped (cooperatively: ``super()`` is the uvicorn protocol class)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        self._read_deadline = self.loop.call_later(self.read_timeout_s, self._on_deadline)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _follow(self) -> None:
        """After bytes arrived: keep (or start) the clock while a request is incomplete, else stop it."""
        if self._reading() and not self.transport.is_closing():
            if self._read_deadline is None:
                self._arm()
        else:
            self._disarm()

    def _on_deadline(self) -> None:
        self._read_deadline = None
        if not self._reading() or self.transport.is_closing():
            return
        logger.info(
            "dropped a connection: its request did not arrive in time",
            extra={
                "client": f"{self.client[0]}:{self.client[1]}" if self.client else None,
                "received": self._what_arrived(),
                "read_timeout_s": self.read_timeout_s,
            },
        )
        self.transport.close()


class ReadDeadlineProtocol(_ReadDeadline, H11Protocol):
    """``H11Protocol`` (pure Python) that drops a connection whose request does not arrive within the
    deadline."""

    def _reading(self) -> bool:
        return self.conn.their_state in _READING

    def _what_arrived(self) -> str:
        return "headers" if self.conn.their_state is h11.SEND_BODY else "part of the headers or nothing"


class HttpToolsReadDeadlineProtocol(_ReadDeadline, HttpToolsProtocol):
    """The same deadline on uvicorn's httptools (C parser) protocol: a request is incomplete from the
    connection opening, or from its first byte, until the parser reports the message complete."""

    _incomplete = True
    _headers_done = False
    _in_message = False  # bytes of a request have been parsed and its end has not
    _lag: LoopLag | None = None
    _answers: ProbeAnswers | None = None  # the app's, once it serves on this loop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.max_loop_lag_s > 0:
            self._lag = LoopLag.of(self.loop, self.max_loop_lag_s)
        self._answers = ProbeAnswers.on(self.loop)

    def data_received(self, data: bytes) -> None:
        """While the loop is too late, a whole bodiless GET arriving on a connection at rest (the sidecars'
        probe) is refused before it is parsed: parsing it and building its request cost more than the
        refusal, and under a crowd the refusals are most of the process's work."""
        lag = self._lag
        if lag is None:
            super().data_received(data)
            return
        lag.read()
        if not self._in_message:
            behind = lag.judge()
            if behind > lag.bound() and self._at_rest():
                began = time.perf_counter()
                path = unparsed_path(data)
                if path is not None and lag.refuses(path, behind):
                    self._refuse_unparsed()
                    # its client's next request waits unread until the loop's next tick: a client that
                    # does not wait its Retry-After cannot keep the loop reading and refusing, which would
                    # starve the requests it admitted and its timer (uvloop reads again at once while more
                    # than 1,024 connections have something to read)
                    self.flow.pause_reading()
                    lag.hold(self._resume_held)
                    lag.refused(behind, time.perf_counter() - began)
                    return
        super().data_received(data)

    def _at_rest(self) -> bool:
        """No request of this connection is being answered or waits to be, and its client reads answers."""
        cycle = self.cycle
        return (
            (cycle is None or cycle.response_complete)
            and not self.pipeline
            and not self.flow.write_paused
            and not self.transport.is_closing()
        )

    def _refuse_unparsed(self) -> None:
        # what uvicorn does for a request and its answer, without the request: the idle timer stops while it
        # is answered and starts again after, and the read deadline stops (a whole request arrived)
        self._unset_keepalive_if_required()
        self.transport.write(refusal(self.server_state.default_headers, keep_alive=True))
        self.server_state.total_requests += 1
        self._incomplete = False
        self._disarm()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def _resume_held(self) -> None:
        if not self.transport.is_closing():
            self.flow.resume_reading()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        """uvicorn starts each request's ASGI task here, when its headers are in (a pipelined one later):
        refuse it instead while the loop is too late."""
        lag = self._lag
        if lag is not None:
            # how late the loop is, and how much later it will be once the requests started before this one
            # in the same turn have run
            behind = lag.judge()
            if behind > lag.bound() and lag.refuses(cycle.scope["path"], behind):
                began = time.perf_counter()
                self._refuse(cycle)
                lag.refused(behind, time.perf_counter() - began)
                return
        if self._answer_at_hand(cycle, app):
            return
        if lag is not None:
            lag.start()
        self._unset_keepalive_if_required()  # a refusal just before, in the same bytes, may have armed it
        super()._start_asgi_task(cycle, app)

    def _answer_at_hand(self, cycle: RequestResponseCycle, app: Any) -> bool:
        """Answer a sidecar's probe whose answer is at hand (``ProbeAnswers.answer_now``: its credential
        cached, its page unchanged) here, without an ASGI task, the middleware chain or the messages of an
        ASGI answer, which cost a probe more than its own work. A request with a body, one with requests
        pipelined behind it, a connection that closes after the answer, or one whose client is not reading
        its answers goes the ordinary way."""
        answers, scope = self._answers, cycle.scope
        if answers is None or scope["method"] != "GET" or not may_be_probe(scope["path"]):
            return False  # every other request pays two comparisons
        if (
            not cycle.keep_alive
            or self.pipeline  # answered here, each would start the next inside its own answer: no end
            or app is not self.app  # a request uvicorn answers itself (its concurrency limit)
            or self.flow.write_paused
            or self.transport.is_closing()
            or _has_body(scope["headers"])
        ):
            return False
        began = time.perf_counter()
        answer = answers.answer_now(cast(Scope, scope), self.server_state.default_headers)
        if answer is None:
            return False
        self._write_answer(cycle, answer)
        if self._lag is not None:
            self._lag.answered(time.perf_counter() - began)
        return True

    def _refuse(self, cycle: RequestResponseCycle) -> None:
        # Kept alive only for a request without a body (a probe): a body not yet read (or one the client
        # holds back for 100-continue) would leave the connection's framing to chance, and a client that does
        # not read its answers (writing paused) gets no more of them.
        keep_alive = cycle.keep_alive and not _has_body(cycle.scope["headers"]) and not self.flow.write_paused
        cycle.keep_alive = keep_alive
        answer = refusal(self.server_state.default_headers, keep_alive=keep_alive)
        if cycle.scope["method"] == "HEAD":
            answer = answer[: answer.index(b"\r\n\r\n") + 4]
        self._write_answer(cycle, answer, close=not keep_alive)

    def _write_answer(self, cycle: RequestResponseCycle, answer: bytes, *, close: bool = False) -> None:
        """Answer ``cycle``'s request with ``answer``, whole HTTP/1.1 bytes, and end it as uvicorn ends a
        response (``on_response``: the keep-alive timer armed again, or the next pipelined request
        started)."""
        cycle.response_started = cycle.response_complete = True  # on_body / on_message_complete skip it
        self.transport.write(answer)
        if close:
            self.transport.close()
        cycle.on_response()

    def on_message_begin(self) -> None:
        self._incomplete, self._headers_done, self._in_message = True, False, True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._headers_done = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._incomplete = self._in_message = False
        super().on_message_complete()

    def _reading(self) -> bool:
        return self._incomplete

    def _what_arrived(self) -> str:
        return "headers" if self._headers_done else "part of the headers or nothing"


def _has_body(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


HTTP_IMPLEMENTATIONS: dict[str, type[_ReadDeadline]] = {
    "h11": ReadDeadlineProtocol,
    "httptools": HttpToolsReadDeadlineProtocol,
}


def protocol_class(
    read_timeout_s: float, http: str = "httptools", max_loop_lag_s: float = DEFAULT_MAX_LAG_S
) -> type[_ReadDeadline]:
    """A protocol class for ``uvicorn.Config(http=...)`` with this deadline and lag bound (0: requests are
    not refused by lag); uvicorn instantiates it."""
    if read_timeout_s <= 0:
        raise ValueError("the request read timeout must be positive")
    if max_loop_lag_s < 0:
        raise ValueError("the event loop's lag bound must be 0 (off) or positive")
    if max_loop_lag_s > 0 and http == "httptools" and not hasattr(HttpToolsProtocol, "_start_asgi_task"):
        # the refusal hooks the method uvicorn starts each request's task with (uvicorn 0.54, constraints.txt)
        raise RuntimeError(
            f"uvicorn {uvicorn.__version__} cannot refuse requests by lag: install the version in "
            "constraints.txt, or run with --max-loop-lag 0"
        )
    base = HTTP_IMPLEMENTATIONS[http]
    return type(base.__name__, (base,), {"read_timeout_s": read_timeout_s, "max_loop_lag_s": max_loop_lag_s})


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    http: str = "httptools",
    loop: str = LOOP_FACTORY,
    max_loop_lag_s: float = DEFAULT_MAX_LAG_S,
    **more: Any,
) -> uvicorn.Config:
    """How every memsync command serves the store app: our logging (no uvicorn config, no access log),
    ``http`` (httptools' C parser, or h11) with the request-read deadline and the lag bound, on ``loop``
    (uvloop accepting every waiting connection at once, ``accept``; or one of uvicorn's names), idle
    connections kept past the store client's own keep-alive (``SERVER_IDLE_KEEPALIVE_S``)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(read_timeout_s, http, max_loop_lag_s),  # type: ignore[arg-type]
        loop=loop,
        log_config=None,
        access_log=False,
        log_level="warning",
        timeout_keep_alive=SERVER_IDLE_KEEPALIVE_S,
        **more,
    )
