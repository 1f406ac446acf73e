"""The store server's event loop accepts every waiting connection when its listening socket is ready
(``server.accept``): libuv alone accepts one per report, and a loop busy with many connections hears of its
listening socket rarely, so new connections waited seconds in the accept queue."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any, ClassVar, TypeVar

from memsync.server.accept import EagerAcceptor, ServerWithAcceptors, new_event_loop

WAITING = 300
T = TypeVar("T")


class Echo(asyncio.Protocol):
    made: ClassVar[list[Echo]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport
        Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data.upper())


def run(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def connect_many(port: int, count: int, into: list[socket.socket]) -> None:
    for _ in range(count):
        into.append(socket.create_connection(("127.0.0.1", port), timeout=30))


def ping(clients: list[socket.socket]) -> list[bytes]:
    answers = []
    for client in clients:
        client.sendall(b"ping")
        answers.append(client.recv(16))
    return answers


def test_every_connection_waiting_is_accepted_at_one_report_and_served() -> None:
    Echo.made = []
    clients: list[socket.socket] = []

    async def main() -> tuple[int, int, float]:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0, backlog=2048)
        assert isinstance(server, ServerWithAcceptors)
        (acceptor,) = server.acceptors
        port = server.sockets[0].getsockname()[1]
        opener = threading.Thread(target=connect_many, args=(port, WAITING, clients))
        opener.start()
        opener.join()  # every connection is in the accept queue (the kernel completes the handshake)
        started = time.monotonic()
        while len(Echo.made) < WAITING and time.monotonic() < started + 10:
            await asyncio.sleep(0)
        took = time.monotonic() - started
        answers = await asyncio.to_thread(ping, clients[:: WAITING // 10])  # served like any other
        assert answers == [b"PING"] * 10
        server.close()
        await server.wait_closed()
        return acceptor.accepted, acceptor.reports, took

    try:
        accepted, reports, took = run(main())
        assert len(Echo.made) == WAITING, f"{len(Echo.made)} of {WAITING} accepted in {took:.1f} s"
        # libuv may take one per report of its own; every other one came in this acceptor's first reports
        assert accepted >= WAITING - 5 and reports <= 3, (accepted, reports)
    finally:
        for client in clients:
            client.close()


def test_closing_the_server_releases_its_port() -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        again = socket.socket()  # the server (and its acceptors) still referenced, the loop running
        try:
            again.bind(("127.0.0.1", port))  # EADDRINUSE while a duplicate of the listening socket is open
            again.listen()
        finally:
            again.close()
        assert isinstance(server, ServerWithAcceptors) and server.acceptors

    run(main())


def test_an_acceptor_closes_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        listening = socket.create_server(("127.0.0.1", 0))
        acceptor = EagerAcceptor(loop, listening, Echo, None)
        acceptor.close()
        acceptor.close()  # a server closed twice
        listening.close()

    run(main())
