"""The store server's HTTP/1.1 connections: uvicorn's h11 protocol plus a request-read deadline.

uvicorn closes idle keep-alive connections, but nothing bounds how long a request may take to *arrive*: a
client that connects and sends nothing, or half its headers, or half its body, holds a connection (and,
mid-body, a request task) forever. Here every request must arrive in full, headers and body, within
``read_timeout_s`` of its first byte (of the connection being opened, for the first request); otherwise the
connection is closed and one INFO line says so. Time the application spends on a request that has fully
arrived is not counted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("memsync.server")

DEFAULT_READ_TIMEOUT_S = 15.0
_READING = (h11.IDLE, h11.SEND_BODY)  # the client's side of a request that has not fully arrived


class ReadDeadlineProtocol(H11Protocol):
    """``H11Protocol`` that drops a connection whose current request does not arrive within the deadline."""

    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in _READING and not self.transport.is_closing():
            if self._read_deadline is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._read_deadline = self.loop.call_later(self.read_timeout_s, self._on_deadline)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _on_deadline(self) -> None:
        self._read_deadline = None
        state = self.conn.their_state
        if state not in _READING or self.transport.is_closing():
            return
        logger.info(
            "dropped a connection: its request did not arrive in time",
            extra={
                "client": f"{self.client[0]}:{self.client[1]}" if self.client else None,
                "received": "headers" if state is h11.SEND_BODY else "part of the headers or nothing",
                "read_timeout_s": self.read_timeout_s,
            },
        )
        self.transport.close()


def protocol_with_read_timeout(read_timeout_s: float) -> type[ReadDeadlineProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with this deadline (uvicorn instantiates it)."""
    if read_timeout_s <= 0:
        raise ValueError("the request read timeout must be positive")
    return type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), {"read_timeout_s": read_timeout_s})


def uvicorn_config(
    app: Any, *, host: str, port: int, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> uvicorn.Config:
    """How every memsync command serves the store app: our logging (no uvicorn config, no access log), h11
    with the request-read deadline."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_with_read_timeout(read_timeout_s),
        log_config=None,
        access_log=False,
        log_level="warning",
    )
