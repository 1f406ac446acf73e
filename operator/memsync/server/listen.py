"""The store server's listening socket, bound before anything else starts (so a port in use is said first)."""

from __future__ import annotations

import socket


class ListenError(Exception):
    """The address cannot be listened on; the message names it and says why."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening); a failure is one line naming the address."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock
