"""The HTTP transport under every StoreClient: httpx, spread over several small connection pools.

httpcore's connection pool does bookkeeping on every request it assigns that grows with the square of its
idle connections, plus one socket-readability syscall per idle connection. With the 64 connections the sync
agent keeps in flight, one pool spends more CPU on that bookkeeping than on the requests themselves (about
2,300 ``is_idle`` calls per request, measured by ``bench/sync_agent.py --profile``). Several pools of at most
``POOL_SIZE`` connections, each request sent to the least busy one, keep the same total concurrency at a small
fraction of that cost.

Proxies and CAs come from the environment as httpx reads them: ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``
with ``NO_PROXY``, and ``SSL_CERT_FILE``/``SSL_CERT_DIR``. httpx ignores the environment's proxies once it is
handed a transport, so ``PooledClient`` instead plugs the pools in through httpx's own transport hooks: httpx
still decides which proxy (or none) serves each URL, and every pool of every route uses it.
"""

from __future__ import annotations

import functools
import math
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from memsync.api.constants import CLIENT_IDLE_KEEPALIVE_S

POOL_SIZE = 8


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """One verifying SSL context per process: building one loads the CA bundle (tens of ms of CPU). httpx
    takes it from ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set, else from certifi."""
    return httpx.create_ssl_context()


class _ReleasingStream(httpx.AsyncByteStream):
    """A response body that tells its pool's counter when it is closed (the connection is free again)."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._release is not None:
                self._release()
                self._release = None


class PooledTransport(httpx.AsyncBaseTransport):
    """``max_connections`` spread over pools of at most ``pool_size``; each request goes to the least busy.
    With ``proxy``, every pool sends through it."""

    def __init__(
        self, *, max_connections: int, pool_size: int = POOL_SIZE, proxy: httpx.Proxy | None = None
    ) -> None:
        count = max(1, math.ceil(max_connections / pool_size))
        per_pool = math.ceil(max_connections / count)
        limits = httpx.Limits(
            max_connections=per_pool,
            max_keepalive_connections=per_pool,
            keepalive_expiry=CLIENT_IDLE_KEEPALIVE_S,
        )
        self._pools = [
            httpx.AsyncHTTPTransport(verify=default_ssl_context(), limits=limits, proxy=proxy)
            for _ in range(count)
        ]
        self._busy = [0] * count

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = min(range(len(self._pools)), key=self._busy.__getitem__)
        self._busy[index] += 1

        def release() -> None:
            self._busy[index] -= 1

        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _ReleasingStream(response.stream, release)
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class PooledClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` (``trust_env`` on) whose direct route and each environment proxy route is a
    ``PooledTransport``. Which route a URL takes (``NO_PROXY`` included) is httpx's own decision."""

    def __init__(self, *, max_connections: int, **kwargs: Any) -> None:
        self._max_connections = max_connections  # read by the hooks below, which httpx calls from __init__
        super().__init__(trust_env=True, **kwargs)

    def _init_transport(self, *args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        return PooledTransport(max_connections=self._max_connections)

    def _init_proxy_transport(
        self, proxy: httpx.Proxy, *args: Any, **kwargs: Any
    ) -> httpx.AsyncBaseTransport:
        return PooledTransport(max_connections=self._max_connections, proxy=proxy)
