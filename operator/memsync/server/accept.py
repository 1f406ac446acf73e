"""Accepting every waiting connection when the listening socket is ready, not one.

libuv (the event loop under uvloop) accepts one connection each time the listening socket is reported
ready, then goes back to polling. A server process whose loop is busy with more than 1,024 connections that
have something to read (epoll hands the loop at most 1,024 ready sockets per poll, in turn) is told about
its listening socket only every 50-900 ms (measured with ``strace``: one ``accept4`` per report, never a
second in a row), so new connections wait in the kernel's accept queue for seconds, a few let in per
second, their requests neither served nor refused: exactly when many sidecars reconnect to a busy server.

``EagerAcceptLoop`` is uvloop's loop with one change: every listening socket a server is created on also
gets an ``EagerAcceptor``, which watches a duplicate of the socket and, each time it is ready, accepts what
is waiting (up to ``MAX_BATCH``) and hands each connection to the loop as the server's own
(``connect_accepted_socket``, with the server's protocol factory and TLS context). libuv's own accept still
runs beside it; whichever is first takes a connection, the other finds none. Closing the server closes the
acceptors first, so the port is released with it. uvicorn creates the loop from ``LOOP_FACTORY``, in the
single process and in each worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any, Final

import uvloop

logger = logging.getLogger("memsync.server")

#: The import path uvicorn's ``loop`` setting takes.
LOOP_FACTORY: Final = "memsync.server.accept:new_event_loop"
#: Connections accepted per report of the listening socket: the accept queue (uvicorn's backlog, 2,048
#: places) empties in one or two reports, each at most a few tens of milliseconds of the loop's time.
MAX_BATCH: Final = 1024
_STREAM_FAMILIES: Final = (socket.AF_INET, socket.AF_INET6)

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class EagerAcceptor:
    """Accepts every connection waiting on ``listening`` when it is ready, for ``protocol_factory``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        listening: socket.socket,
        protocol_factory: ProtocolFactory,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.loop = loop
        self.protocol_factory = protocol_factory
        self.tls = tls
        self.accepted = 0
        self.reports = 0  # times the socket was ready and this acceptor ran
        self._sock = socket.socket(fileno=os.dup(listening.fileno()))  # the same queue, its own registration
        self._sock.setblocking(False)
        self._tasks: set[asyncio.Task[Any]] = set()
        loop.add_reader(self._sock.fileno(), self._drain)

    def _drain(self) -> None:
        self.reports += 1
        for _ in range(MAX_BATCH):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # none left (or libuv took it)
            except ConnectionAbortedError:
                continue
            except OSError as exc:  # out of file descriptors: libuv's own accept sheds it; try next report
                logger.warning("could not accept a connection", extra={"error": exc.strerror or str(exc)})
                return
            self.accepted += 1
            task = self.loop.create_task(self._connect(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvloop sets on its own
            await self.loop.connect_accepted_socket(self.protocol_factory, conn, ssl=self.tls)
        except (OSError, ssl.SSLError):
            conn.close()  # the client left, or its TLS handshake failed: as for libuv's own accepts
        except Exception as exc:  # the loop closing, or the protocol failing to start: this one is dropped
            conn.close()
            logger.warning("dropped a connection it could not start", extra={"error": type(exc).__name__})

    def close(self) -> None:
        if self._sock.fileno() >= 0:
            self.loop.remove_reader(self._sock.fileno())
            self._sock.close()


class ServerWithAcceptors(asyncio.AbstractServer):
    """The loop's server, whose ``close`` closes its acceptors first."""

    def __init__(self, server: asyncio.AbstractServer, acceptors: Iterable[EagerAcceptor]) -> None:
        self._server = server
        self.acceptors = list(acceptors)

    @property
    def sockets(self) -> Any:
        return self._server.sockets  # type: ignore[attr-defined]

    def close(self) -> None:
        for acceptor in self.acceptors:
            acceptor.close()
        self._server.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._server.get_loop()

    def is_serving(self) -> bool:
        return self._server.is_serving()

    async def start_serving(self) -> None:
        await self._server.start_serving()

    async def serve_forever(self) -> None:
        await self._server.serve_forever()

    async def wait_closed(self) -> None:
        await self._server.wait_closed()


class EagerAcceptLoop(uvloop.Loop):
    """uvloop's loop, whose TCP servers accept every waiting connection at once (module docstring)."""

    async def create_server(  # type: ignore[override]
        self, protocol_factory: ProtocolFactory, *args: Any, **kwargs: Any
    ) -> asyncio.AbstractServer:
        server = await super().create_server(protocol_factory, *args, **kwargs)
        tls: ssl.SSLContext | None = kwargs.get("ssl")
        acceptors = [
            EagerAcceptor(self, listening, protocol_factory, tls)
            for listening in server.sockets  # type: ignore[attr-defined]
            if listening.family in _STREAM_FAMILIES
        ]
        return ServerWithAcceptors(server, acceptors)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The store server's event loop (uvicorn's ``loop`` setting: ``LOOP_FACTORY``)."""
    loop: asyncio.AbstractEventLoop = EagerAcceptLoop()
    return loop
