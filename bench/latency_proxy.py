"""A loopback HTTP/1.1 reverse proxy that adds a fixed delay to every request (stand-in for network latency)
and, with a ``FaultPlan``, injects faults into a seeded random share of them (stand-in for a bad network).

Benchmarks put it between a client and the store server to see how request counts turn into wall time:

    from latency_proxy import LatencyProxy      # with bench/ on sys.path

    async with LatencyProxy("http://127.0.0.1:8080", delay_s=0.05) as proxy:
        client = StoreClient(proxy.url, api_key=...)
        ...
        print(proxy.request_count)

Standalone: ``python bench/latency_proxy.py --upstream http://127.0.0.1:8080 --delay-ms 50 --port 8081``.

The soak test puts it between the sync agents and the store server with ``faults=FaultPlan(rate=0.10,
seed=...)``: each request draws from one ``random.Random(seed)`` whether it is hit and by which fault
(``FAULT_KINDS``): ``reset`` (the connection breaks before the request is forwarded), ``server_error`` (a 503
answered without forwarding), ``throttle`` (a 429 with ``Retry-After``, not forwarded), ``delay`` (forwarded
late) or ``response_lost`` (forwarded and applied upstream, then the connection breaks before the answer).
``faults_injected`` counts them per kind; ``observe`` sees every request (method, target, body) as received.

It is served by uvicorn (keep-alive and many concurrent connections handled by a real HTTP server) and
forwards with one pooled ``httpx.AsyncClient``. Method, path (after the upstream URL's own path prefix),
query, headers and body go upstream unchanged except for hop-by-hop headers; status, headers and raw body
come back the same way. An unreachable upstream answers 502 in the memory store API's error envelope, and so
does every request during an ``outage(seconds)`` (the store unreachable for exactly that long).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import signal
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from memsync.client.transport import PooledTransport

__all__ = ["FAULT_KINDS", "FaultPlan", "LatencyProxy", "choose_fault"]

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


FAULT_KINDS = ("reset", "server_error", "throttle", "delay", "response_lost")
# Both break the connection after the status line went out, which is the closest an ASGI app gets to a reset:
# the client reads a truncated response and sees a transport error, never an answer.
_BROKEN = ("reset", "response_lost")
_INCOMPLETE_RESPONSE_LOG = "ASGI callable returned without completing response."


@dataclass(frozen=True)
class FaultPlan:
    """Which share of requests gets a fault, drawn from ``random.Random(seed)``; kinds are equally likely."""

    rate: float = 0.10
    seed: int = 0
    kinds: tuple[str, ...] = FAULT_KINDS
    delay_range_s: tuple[float, float] = (0.2, 1.5)
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"rate must be between 0 and 1, got {self.rate!r}")
        unknown = sorted(set(self.kinds) - set(FAULT_KINDS))
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of {', '.join(FAULT_KINDS)}; got {unknown}")


def choose_fault(rng: random.Random, plan: FaultPlan) -> str | None:
    """The fault for the next request, or None to forward it untouched (two draws per request, always)."""
    hit, pick = rng.random(), rng.randrange(len(plan.kinds))
    return plan.kinds[pick] if hit < plan.rate else None


class _DropIncompleteResponseLog(logging.Filter):
    """uvicorn logs an ERROR for each deliberately broken response; those are the plan, not a problem."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _INCOMPLETE_RESPONSE_LOG


_QUIET_BROKEN_RESPONSES = _DropIncompleteResponseLog()


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
        faults: FaultPlan | None = None,
        observe: Callable[[str, str, bytes], None] | None = None,
    ) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s!r}")
        self.faults = faults
        self.faults_injected: Counter[str] = Counter()
        self._rng = random.Random(faults.seed if faults is not None else 0)
        self._observe = observe
        self.upstream_url = upstream_url.rstrip("/")
        self.delay_s = delay_s
        self.host = host
        self.port = port
        self.request_count = 0
        self._max_upstream_connections = max_upstream_connections
        self._upstream_timeout_s = upstream_timeout_s
        self._upstream: httpx.AsyncClient | None = None
        self._down_until = 0.0  # time.monotonic() until which every request answers 502
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
        if self.faults is not None:
            logging.getLogger("uvicorn.error").addFilter(_QUIET_BROKEN_RESPONSES)  # once per process
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

    def outage(self, seconds: float) -> None:
        """From now on, for ``seconds``, the upstream is unreachable: every request answers 502 unforwarded.
        Callable from any thread."""
        self._down_until = time.monotonic() + seconds

    # --- the ASGI application -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.request_count += 1
        body = await _read_body(receive)
        if body is None:
            return
        target = scope["raw_path"].decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        if self._observe is not None:
            self._observe(scope["method"], target, body)
        if time.monotonic() < self._down_until:
            await self._send_error(send, 502, "api_error", "latency proxy: upstream failed: store outage")
            return
        fault = choose_fault(self._rng, self.faults) if self.faults is not None else None
        if fault is not None:
            self.faults_injected[fault] += 1
        delay = self.delay_s
        if fault == "delay":
            assert self.faults is not None
            delay += self._rng.uniform(*self.faults.delay_range_s)
        if delay > 0:
            await asyncio.sleep(delay)
        if fault == "server_error":
            await self._send_error(send, 503, "api_error", "fault proxy: injected 503")
            return
        if fault == "throttle":
            assert self.faults is not None
            retry_after = (b"retry-after", str(self.faults.retry_after_s).encode("ascii"))
            await self._send_error(send, 429, "rate_limit_error", "fault proxy: injected 429", [retry_after])
            return
        if fault == "reset":
            await self._break(send)
            return
        assert self._upstream is not None
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        try:
            request = self._upstream.build_request(
                scope["method"], self.upstream_url + target, headers=headers, content=body
            )
            response = await self._upstream.send(request, stream=True)
            try:
                answer = b"".join([chunk async for chunk in response.aiter_raw()])
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            failure = f"latency proxy: upstream failed: {type(exc).__name__}: {exc}"
            await self._send_error(send, 502, "api_error", failure)
            return
        if fault == "response_lost":
            await self._break(send)
            return
        out_headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
        out_headers.append((b"content-length", str(len(answer)).encode("ascii")))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out_headers})
        await send({"type": "http.response.body", "body": answer})

    @staticmethod
    async def _break(send: Send) -> None:
        """Start a response and never finish it: uvicorn closes the connection mid-answer."""
        headers = [(b"content-length", b"64"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 502, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": True})

    @staticmethod
    async def _send_error(
        send: Send, status: int, error_type: str, message: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        """An answer in the memory store API's error envelope."""
        body = json.dumps(
            {"type": "error", "error": {"type": error_type, "message": message}, "request_id": None}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": [*headers, *(extra or [])]})
        await send({"type": "http.response.body", "body": body})


async def _serve_forever(
    upstream: str, delay_ms: float, host: str, port: int, faults: FaultPlan | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with LatencyProxy(
        upstream, delay_s=delay_ms / 1000.0, host=host, port=port, faults=faults
    ) as proxy:
        print(
            f"latency proxy {proxy.url} -> {upstream} (+{delay_ms:g} ms per request); Ctrl-C stops",
            flush=True,
        )
        await stop.wait()
        print(
            f"forwarded {proxy.request_count} request(s); faults: {dict(proxy.faults_injected)}", flush=True
        )


async def _read_body(receive: Receive) -> bytes | None:
    """The request's whole body; None when the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream", required=True, help="upstream base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument(
        "--delay-ms", type=float, default=50.0, help="delay added to each request (default 50)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    parser.add_argument(
        "--fault-rate", type=float, default=0.0, help="share of requests that get a fault (default 0: none)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault choices (default 0)")
    args = parser.parse_args(argv)
    faults = FaultPlan(rate=args.fault_rate, seed=args.seed) if args.fault_rate > 0 else None
    asyncio.run(_serve_forever(args.upstream, args.delay_ms, args.host, args.port, faults))


if __name__ == "__main__":
    main()
