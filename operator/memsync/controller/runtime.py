"""One operator process: its liveness probe, the leader election, then kopf with memsync's handlers.

``run`` is what ``memsync operator`` runs (and what the operator tier's tests run, in a thread):

1. the liveness probe starts (``liveness.py``), so a standby is live too;
2. with leader election, it waits until this replica holds the Lease (``leadership/``), then keeps renewing
   it; nothing acts before (the fence stays closed: a write would stop the process);
3. kopf runs the handlers (``sessionmemory/registry.py``) with an HTTP session whose every request passes
   the fence and whose watches feed the probe, and whose ``User-Agent`` names this replica;
4. on a clean stop (SIGTERM, or ``stop``), the Lease is released so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import kopf

from memsync.controller import metrics
from memsync.controller.kube import KubeApi
from memsync.controller.leadership import lease
from memsync.controller.leadership.elector import LeaderElector
from memsync.controller.leadership.fence import Fence
from memsync.controller.liveness import Bounds, Liveness
from memsync.controller.sessionmemory.registry import build_memo, build_registry
from memsync.controller.settings import ControllerConfig, bounded_session, watches_per_namespace

logger = logging.getLogger("memsync.operator")

Flag = asyncio.Event | threading.Event


@dataclass(frozen=True)
class Election:
    """The Lease that decides which replica acts, and this replica's name in it."""

    namespace: str
    name: str
    identity: str
    timings: lease.Timings = field(default_factory=lease.Timings)


@dataclass(frozen=True)
class Process:
    """How this operator process runs, besides what the handlers need (``ControllerConfig``)."""

    settings: kopf.OperatorSettings
    namespaces: tuple[str, ...] = ()
    patterns: bool = False  # the namespaces are globs: kopf watches every namespace that matches
    election: Election | None = None
    liveness_url: str | None = None
    liveness_bounds: Bounds = field(default_factory=Bounds)
    user_agent: str | None = None

    def watches(self, *, environments: bool) -> int | None:
        """How many watches kopf holds at once (None: not known in advance, with namespace globs)."""
        if self.patterns:
            return None
        return watches_per_namespace(environments=environments) * max(len(self.namespaces), 1)


async def _wait(flag: Flag) -> None:
    if isinstance(flag, asyncio.Event):
        await flag.wait()
        return
    while not flag.is_set():  # noqa: ASYNC110 (a thread's Event: nothing to await)
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def _serving(url: str | None, liveness: Liveness) -> AsyncIterator[None]:
    """Serve the liveness probe at ``url`` (``http://HOST:PORT/PATH``) while the block runs."""
    if url is None:
        yield
        return
    from aiohttp import web  # noqa: PLC0415 (loaded with kopf anyway)

    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.port is None:
        raise ValueError(f"--liveness {url!r}: expected http://HOST:PORT/PATH")
    app = web.Application()
    app.router.add_get(parts.path or "/", liveness.handle)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, parts.hostname or "127.0.0.1", parts.port).start()
    try:
        yield
    finally:
        await runner.cleanup()


async def _acquire(elector: LeaderElector, stop: Flag) -> bool:
    """Wait for the Lease or for ``stop``; True when this replica holds the Lease."""
    acquiring = asyncio.create_task(elector.acquire())
    stopping = asyncio.create_task(_wait(stop))
    await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for task in (acquiring, stopping):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return elector.leading


def _stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT end a standby's wait (kopf installs its own handlers once it runs)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def run(
    kube: KubeApi,
    config: ControllerConfig,
    process: Process,
    *,
    fence: Fence,
    stop: Flag | None = None,
    ready: Flag | None = None,
) -> None:
    """Run one operator process until ``stop`` is set or a signal arrives."""
    liveness = Liveness(process.liveness_bounds)
    kube.fence = fence.check
    if process.user_agent:
        kube.user_agent = process.user_agent
    if stop is None:
        stop = asyncio.Event()
        _stop_on_signals(stop)
    elector: LeaderElector | None = None
    keeper: asyncio.Task[None] | None = None
    async with _serving(process.liveness_url, liveness):
        try:
            if process.election is not None:
                e = process.election
                elector = LeaderElector(
                    kube,
                    namespace=e.namespace,
                    name=e.name,
                    identity=e.identity,
                    timings=e.timings,
                    fence=fence,
                )
                liveness.elector_attempt = lambda: elector.last_attempt if elector else 0.0
                if not await _acquire(elector, stop):
                    logger.info("stopped while standing by")
                    return
                keeper = asyncio.create_task(elector.keep(), name="memsync-leader-election")
            else:
                metrics.LEADER.set(1)  # a single replica without a Lease acts all the time
            await _operate(kube, config, process, fence=fence, liveness=liveness, stop=stop, ready=ready)
        finally:
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            if elector is not None:
                await elector.release()


async def _operate(
    kube: KubeApi,
    config: ControllerConfig,
    process: Process,
    *,
    fence: Fence,
    liveness: Liveness,
    stop: Flag,
    ready: Flag | None,
) -> None:
    traces = [liveness.trace_config(), fence_trace(fence)]
    watches = process.watches(environments=config.environments)

    async def login(**_: Any) -> kopf.AiohttpSession:
        return bounded_session(
            kube.connection_info(), watches=watches, traces=traces, user_agent=process.user_agent
        )

    await kopf.operator(
        registry=build_registry(config, login=login),
        settings=process.settings,
        memo=build_memo(kube, config, liveness, fence),
        standalone=True,
        clusterwide=not process.namespaces,
        namespaces=list(process.namespaces),
        stop_flag=stop,
        ready_flag=ready,
    )


def fence_trace(fence: Fence) -> Any:
    """An aiohttp trace that asks the fence before every request of kopf's session."""
    from aiohttp import TraceConfig  # noqa: PLC0415

    async def on_start(_: Any, __: Any, params: Any) -> None:
        fence.check(params.method, params.url.path)

    trace = TraceConfig()
    trace.on_request_start.append(on_start)
    return trace
