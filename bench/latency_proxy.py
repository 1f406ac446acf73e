"""A loopback HTTP/1.1 reverse proxy that adds a fixed delay to every request (stand-in for network latency).

Benchmarks put it between a client and the store server to see how request counts turn into wall time:

    from latency_proxy import LatencyProxy      # with bench/ on sys.path

    async with LatencyProxy("http://127.0.0.1:8080", delay_s=0.05) as proxy:
        client = StoreClient(proxy.url, api_key=...)
        ...
        print(proxy.request_count)

Standalone: ``python bench/latency_proxy.py --upstream http://127.0.0.1:8080 --delay-ms 50 --port 8081``.

It is served by uvicorn (keep-alive and many concurrent connections handled by a real HTTP server) and
forwards with one pooled ``httpx.AsyncClient``. Method, path (after the upstream URL's own path prefix),
query, headers and body go upstream unchanged except for hop-by-hop headers; status, headers and raw body
come back the same way. An unreachable upstream answers 502 in the memory store API's error envelope.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from memsync.client.transport import PooledTransport

__all__ = ["LatencyProxy"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# RFC 9110 §7.6.1 hop-by-hop headers, plus the ones the proxy recomputes itself.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the process embedding the proxy owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LatencyProxy:
    """Forward to ``upstream_url`` after sleeping ``delay_s`` per request. Use with ``async with``.

    ``url`` is the proxy's base URL (valid once started); ``request_count`` counts requests received.
    """

    def __init__(
        self,
        upstream_url: str,
        *,
        delay_s: float = 0.05,
        host: str = "127.0.0.1",
        port: int = 0,
        max_upstream_connections: int = 512,
        upstream_timeout_s: float = 60.0,
    ) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s!r}")
        self.upstream_url = upstream_url.rstrip("/")
        self.delay_s = delay_s
        self.host = host
        self.port = port
        self.request_count = 0
        self._max_upstream_connections = max_upstream_connections
        self._upstream_timeout_s = upstream_timeout_s
        self._upstream: httpx.AsyncClient | None = None
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the latency proxy is not started")
        return f"http://{self.host}:{self.port}"

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the latency proxy is already started")
        self._upstream = httpx.AsyncClient(
            timeout=httpx.Timeout(self._upstream_timeout_s),
            # The sync agent's own transport: one big httpcore pool would make the proxy, which shares the
            # machine's cores with the agent under test, burn CPU on pool bookkeeping.
            transport=PooledTransport(max_connections=self._max_upstream_connections),
            follow_redirects=False,
            trust_env=False,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            await self._upstream.aclose()
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self,
            lifespan="off",
            log_level="warning",
            access_log=False,
            server_header=False,
            date_header=False,
            timeout_keep_alive=60,
            timeout_graceful_shutdown=2,
            backlog=2048,
        )
        self._server = _EmbeddedServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the latency proxy stopped while starting")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        if self._upstream is not None:
            await self._upstream.aclose()
        self._server = None
        self._task = None
        self._upstream = None

    async def __aenter__(self) -> LatencyProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- the ASGI application -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.request_count += 1
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        assert self._upstream is not None
        target = self.upstream_url + scope["raw_path"].decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        try:
            request = self._upstream.build_request(
                scope["method"], target, headers=headers, content=b"".join(chunks)
            )
            response = await self._upstream.send(request, stream=True)
            try:
                body = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            await self._send_bad_gateway(send, f"latency proxy: upstream failed: {type(exc).__name__}: {exc}")
            return
        out_headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
        out_headers.append((b"content-length", str(len(body)).encode("ascii")))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out_headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _send_bad_gateway(send: Send, message: str) -> None:
        body = json.dumps(
            {"type": "error", "error": {"type": "api_error", "message": message}, "request_id": None}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 502, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _serve_forever(upstream: str, delay_ms: float, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with LatencyProxy(upstream, delay_s=delay_ms / 1000.0, host=host, port=port) as proxy:
        print(
            f"latency proxy {proxy.url} -> {upstream} (+{delay_ms:g} ms per request); Ctrl-C stops",
            flush=True,
        )
        await stop.wait()
        print(f"forwarded {proxy.request_count} request(s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="upstream base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument(
        "--delay-ms", type=float, default=50.0, help="delay added to each request (default 50)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    args = parser.parse_args(argv)
    asyncio.run(_serve_forever(args.upstream, args.delay_ms, args.host, args.port))


if __name__ == "__main__":
    main()
