"""The agent's three commands as async functions: ``mount``, ``sync`` (loop, ``--once``, final shutdown) and
``flush`` (push-only, or ``--final``). The click layer (``memsync.cli.agent``) only parses options and maps
the result to an exit code; tests drive these functions in-process on the same code path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.agent import messages, session_stores
from memsync.agent.config import AgentConfig, ConfigError
from memsync.agent.context import SyncContext
from memsync.agent.engine import StoreSync
from memsync.agent.localfs import make_root
from memsync.agent.loop import FinalRequest, PassLoop
from memsync.agent.metrics import Metrics, MetricsServer
from memsync.agent.recorder import PassStats, is_transient
from memsync.agent.state import load_state, remove_state
from memsync.api.secret import WorkSecretError, decode_work_secret
from memsync.client import StoreClient
from memsync.client import errors as store_errors
from memsync.contracts.health import SyncHealth
from memsync.contracts.report import (
    FlushReport,
    MountFailure,
    MountReport,
    Report,
    StoreCounts,
    render_report,
    report_payload,
)

logger = logging.getLogger("memsync.agent")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


class AgentFailure(Exception):
    """A command failed with a documented message (the termination log and stderr carry it)."""

    def __init__(self, message: str, store: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.store = store


def write_termination_log(config: AgentConfig | None, report: Report, path: Path | None = None) -> None:
    """The report as one line of JSON (< 4 KiB) to the termination log, written only if its folder exists."""
    target = path if path is not None else (config.termination_path if config is not None else None)
    if target is None or not target.parent.is_dir():
        return
    line = render_report(report)
    try:
        with target.open("w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:
        logger.warning("cannot write the termination log", extra={"path": str(target), "error": str(exc)})


def make_client(config: AgentConfig) -> StoreClient:
    """A Bearer client from the work-item secret; raises AgentFailure with the documented message."""
    try:
        decoded = decode_work_secret(config.secret_value())
    except WorkSecretError as exc:
        raise AgentFailure(str(exc)) from None
    base_url = decoded.api_base_url or config.base_url
    return StoreClient.from_work_secret(config.secret_value() or "", base_url=base_url, max_connections=64)


def _log_start(command: str, config: AgentConfig) -> None:
    logger.info(
        f"memsync {command} starting",
        extra={
            "session_id": config.session_id or "",
            "stores": ",".join(s.memory_store_id for s in config.stores),
            "interval": config.interval,
            "early_sync": config.early_sync,
            "deletions": config.deletions,
        },
    )


# --- mount ------------------------------------------------------------------------------------------------


@dataclass
class MountResult:
    memories: dict[str, int] = field(default_factory=dict)


async def mount(config: AgentConfig, *, client: StoreClient | None = None) -> MountResult:
    """Materialise every store (docs/sync-semantics.md#mount). On any failure, remove what this command
    created."""
    # Refuse first, before creating anything, if anything exists at any mount path (lstat: a dangling
    # symlink counts) - memsync never deletes a folder it did not create.
    own_client = client is None
    api = make_client(config) if client is None else client  # no sessions token: fail before touching disk
    from_session = config.stores_from_session
    try:
        config = await session_stores.resolve(config, api)
    except session_stores.SessionStoresError as exc:
        if own_client:
            await api.aclose()
        raise AgentFailure(exc.message, exc.store) from None
    _log_start("mount", config)
    for store in config.stores:
        if os.path.lexists(config.mount_dir(store)):  # noqa: ASYNC240 (one lstat per store)
            if own_client:
                await api.aclose()
            raise AgentFailure(f"{messages.ALREADY_EXISTS}: {store.mount_path}", store.memory_store_id)
    context = SyncContext(config, api)
    created: list[str] = []
    result = MountResult()
    try:
        for store in config.stores:  # create every folder first, so a permissions problem fails fast
            engine = StoreSync(context, store)
            try:
                root, made = await asyncio.to_thread(make_root, engine.path)
                root.close()
                created.extend(str(p) for p in made)
            except FileExistsError:
                raise AgentFailure(
                    f"{messages.ALREADY_EXISTS}: {store.mount_path}", store.memory_store_id
                ) from None
            except OSError as exc:
                raise AgentFailure(
                    f"{messages.CANNOT_CREATE} {store.mount_path}: {exc.strerror or exc}; "
                    f"{messages.MAKE_WRITABLE}",
                    store.memory_store_id,
                ) from None

        async def one(store_index: int) -> None:
            store = config.stores[store_index]
            engine = StoreSync(context, store)
            try:
                count = await engine.populate()
            except (store_errors.StoreError, OSError) as exc:
                raise AgentFailure(
                    f"{messages.DOWNLOAD_FAILED}{store.memory_store_id}: {exc}", store.memory_store_id
                ) from None
            result.memories[store.memory_store_id] = count
            logger.info(
                "memory store mounted",
                extra={"memory_store_id": store.memory_store_id, "path": store.mount_path, "memories": count},
            )

        await _gather_first_failure([one(i) for i in range(len(config.stores))])
        if from_session:
            await asyncio.to_thread(session_stores.save_resolved, config)
    except BaseException:
        _undo_mount(config, created)
        raise
    finally:
        if own_client:
            await api.aclose()
    return result


async def _gather_first_failure(coros: Sequence[Any]) -> None:
    """Run concurrently; on the first failure cancel the rest and re-raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_mount(config: AgentConfig, *, client: StoreClient | None = None) -> int:
    """``memsync mount`` with its termination message; returns the exit code."""
    try:
        result = await mount(config, client=client)
    except asyncio.CancelledError:  # SIGTERM (memsync.pid1): the Pod is going away before the sandbox started
        write_termination_log(config, MountFailure(store=None, error=messages.MOUNT_INTERRUPTED))
        raise
    except AgentFailure as exc:
        logger.error(exc.message, extra={"memory_store_id": exc.store or ""})
        write_termination_log(config, MountFailure(store=exc.store, error=exc.message))
        return EXIT_FAILED
    write_termination_log(config, MountReport(memories=dict(result.memories)))
    return EXIT_OK


def _undo_mount(config: AgentConfig, created: list[str]) -> None:
    for path in reversed(created):
        with contextlib.suppress(OSError):
            shutil.rmtree(path)  # fd-based on Linux: never follows a symlink planted inside
    for store in config.stores:
        with contextlib.suppress(OSError):
            remove_state(config.state_path, store.memory_store_id)


# --- sync ---------------------------------------------------------------------------------------------------


RETRY_INITIAL_S = 0.5  # the shutdown passes retry transient failures with this backoff, doubling...
RETRY_CAP_S = 4.0  # ...up to this, until their deadline


@dataclass
class FlushResult:
    """The final shutdown's (or a flush's) result: the termination report and the exit code."""

    report: FlushReport

    @property
    def complete(self) -> bool:
        return self.report.complete

    @property
    def stores(self) -> dict[str, dict[str, Any]]:
        """Per store, what this command did (the report's ``stores``, as JSON)."""
        return {sid: counts.to_json() for sid, counts in self.report.stores.items()}

    def payload(self) -> dict[str, Any]:
        """The termination report as a JSON object."""
        return report_payload(self.report)


class SyncAgent:
    """The engines of every configured store, sharing one client, limiter and metrics."""

    def __init__(self, config: AgentConfig, client: StoreClient, metrics: Metrics | None = None) -> None:
        self.config = config
        self.client = client
        self.context = SyncContext(config, client, metrics)
        self.stores = [StoreSync(self.context, s) for s in config.stores]

    @property
    def metrics(self) -> Metrics:
        return self.context.metrics

    async def sync_once(
        self, *, final: bool = False, lock_timeout: float | None = None
    ) -> dict[str, PassStats]:
        """One pass over every store, in parallel. A store's failure is logged; the others continue."""
        results = await asyncio.gather(
            *(self._sync_store(e, final=final, lock_timeout=lock_timeout) for e in self.stores)
        )
        return {e.id: r for e, r in zip(self.stores, results, strict=True)}

    async def pass_of(self, engine: StoreSync) -> PassStats:
        """One periodic (or early) pass of one store; a failure is logged and recorded, never raised."""
        return await self._sync_store(engine, final=False, lock_timeout=None)

    async def _sync_store(self, engine: StoreSync, *, final: bool, lock_timeout: float | None) -> PassStats:
        """One pass of one store; a failure is logged and recorded, never raised."""
        try:
            return await engine.sync_pass(final=final, lock_timeout=lock_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.warning(messages.SYNC_FAILED, extra={"memory_store_id": engine.id, "error": error})
            self.metrics.passes.labels(engine.id, "failed").inc()
            stats = PassStats(
                outcome="failed", last_error=f"{messages.SYNC_FAILED}: {error}", transient=is_transient(exc)
            )
            engine.last = stats
            engine.recorder.outcome("failed", stats.last_error, None)
            return stats

    async def _unsent_now(self, engine: StoreSync) -> int:
        """Unsent files of a flush that ended early: its own count once its scan was done, else a scan."""
        if engine.progress.scanned:
            return engine.progress.unsent
        return await asyncio.to_thread(engine.count_unsaved)

    async def _flush_store(self, engine: StoreSync, deadline: float) -> PassStats:
        """Push-only passes of one store until nothing is left to retry, or the deadline."""
        loop = asyncio.get_running_loop()
        delay = RETRY_INITIAL_S
        while True:
            try:
                stats = await engine.flush_pass(lock_timeout=max(0.0, deadline - loop.time()))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                logger.warning("memory flush failed", extra={"memory_store_id": engine.id, "error": error})
                unsent = await self._unsent_now(engine)
                engine.tally.unsent = unsent
                stats = PassStats(
                    outcome="failed",
                    changed=engine.progress.changed,
                    unsent=unsent,
                    errors=1,
                    transient=is_transient(exc),
                    last_error=error,
                )
                engine.last = stats
            if not (stats.unsent and stats.transient) or loop.time() + delay >= deadline:
                return stats
            logger.info(
                "memory flush: retrying the files it could not upload yet",
                extra={"memory_store_id": engine.id, "not_saved": stats.unsent, "retry_in": delay},
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP_S)

    async def _final_sync(self, deadline: float) -> None:
        """The final sync of every store, repeated for the stores whose pass failed (or left transfers to
        retry) with backoff, until all synced cleanly or the deadline."""
        loop = asyncio.get_running_loop()
        pending = list(self.stores)
        delay = RETRY_INITIAL_S
        while True:
            lock_timeout = max(0.0, deadline - loop.time())
            results = await asyncio.gather(
                *(self._sync_store(e, final=True, lock_timeout=lock_timeout) for e in pending)
            )
            pending = [e for e, r in zip(pending, results, strict=True) if r.transient]
            if not pending or loop.time() + delay >= deadline:
                return
            logger.info(
                "final memory sync: retrying the stores that failed",
                extra={"stores": ",".join(e.id for e in pending), "retry_in": delay},
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP_S)

    def _reset_tallies(self) -> None:
        for engine in self.stores:
            engine.recorder.tally = StoreCounts()

    async def flush(self) -> FlushResult:
        """The preStop step: push what changed now, bounded by the flush timeout."""
        self._reset_tallies()
        await self._bounded_flush()
        return self._outcome()

    async def final_shutdown(self) -> FlushResult:
        """The final sync (delete window waived, cap applied), then the push-only flush, each bounded by the
        flush timeout and each retrying transient failures until then."""
        self._reset_tallies()
        budget = self.config.flush_timeout
        task = asyncio.create_task(self._final_sync(asyncio.get_running_loop().time() + budget))
        done, _ = await asyncio.wait({task}, timeout=budget)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            logger.warning(messages.FINAL_CUT_OFF.format(ms=int(budget * 1000)))
        await self._bounded_flush()
        return self._outcome()

    async def _bounded_flush(self) -> None:
        budget = self.config.flush_timeout
        deadline = asyncio.get_running_loop().time() + budget
        tasks = {asyncio.create_task(self._flush_store(e, deadline)): e for e in self.stores}
        _, pending = await asyncio.wait(tasks, timeout=budget)
        if not pending:
            return
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        logger.warning(messages.FLUSH_CUT_OFF.format(ms=int(budget * 1000)))
        for task in pending:
            engine = tasks[task]
            unsent = await self._unsent_now(engine)
            changed = max(engine.progress.changed, unsent)
            engine.tally.unsent = unsent
            logger.warning(
                "memory flush cut off: " + messages.FLUSH_UNSENT.format(unsent=unsent, changed=changed),
                extra={"memory_store_id": engine.id, "not_saved": unsent, "changed": changed},
            )

    def _outcome(self) -> FlushResult:
        stores = {e.id: e.tally.copy() for e in self.stores}
        totals: dict[str, StoreCounts] = {}
        for engine in self.stores:
            logger.info(
                "memory flush outcome", extra={"memory_store_id": engine.id, **engine.tally.to_json()}
            )
            with contextlib.suppress(Exception):
                state = load_state(self.config.state_path, engine.id)
                if state is not None:
                    totals[engine.id] = state.totals
        complete = all(c.unsent == 0 for c in stores.values())
        return FlushResult(FlushReport(complete=complete, stores=stores, totals=totals))

    def health(self) -> SyncHealth:
        """The document served at ``/status``: per store, the last pass's health and the session's totals."""
        stores = {e.id: e.health for e in self.stores}
        return SyncHealth(healthy=all(h.healthy for h in stores.values()), stores=stores)


async def run_sync(
    config: AgentConfig,
    *,
    once: bool = False,
    client: StoreClient | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    metrics: Metrics | None = None,
    on_ready: Any = None,
) -> int:
    """``memsync sync``: passes every interval (with jitter) and soon after a change (``memsync.agent.loop``)
    until SIGTERM, then the final shutdown.

    Returns the exit code: with ``once``, 0 unless a store failed; otherwise 0 when the final shutdown saved
    everything, else 1. Never dies on a sync error.
    """
    config = _with_resolved_stores(config)
    own_client = client is None
    api = make_client(config) if client is None else client
    agent = SyncAgent(config, api, metrics)
    stop_event = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    terminated = asyncio.Event()  # SIGTERM/SIGINT (stop_event is also set by a runner's final request)
    final = FinalRequest(stop_event)
    installed: list[signal.Signals] = []

    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        terminated.set()
        stop_event.set()

    if install_signals and not once:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
    # Logged once SIGTERM is handled: from this line on, the end of the session runs the final flush.
    _log_start("sync", config)
    server: MetricsServer | None = None
    try:
        if config.metrics_port is not None and not once:
            server = MetricsServer(
                agent.metrics, port=config.metrics_port, health=agent.health, final=final.request
            )
            await server.start()
        for engine in agent.stores:
            agent.metrics.set_ready(engine.id, False)
        if on_ready is not None:
            on_ready(agent, server)
        if once:
            results = await agent.sync_once()
            return EXIT_FAILED if any(r.outcome == "failed" for r in results.values()) else EXIT_OK
        await PassLoop(agent, stop_event).run()
        if final.requested:
            logger.info("the session runner asked for the final sync and flush: running them")
        else:  # a signal, or an embedder (memsync dev) that set the stop event and said why
            why = f"{received[0]} received" if received else "asked to stop"
            logger.info(f"{why}: running the final sync and flush")
        outcome = await agent.final_shutdown()
        write_termination_log(config, outcome.report)
        if final.requested:
            # The runner stops the work item on this answer; the Pod ends after it. Nothing more to sync:
            # wait for that end without another pass (the report above stays the Pod's last word).
            await final.answer(outcome.payload())
            if installed:
                await terminated.wait()
                # A preStop flush that ran in between wrote its own (empty) report: this one is the last word.
                write_termination_log(config, outcome.report)
        return EXIT_OK if outcome.complete else EXIT_FAILED
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if server is not None:
            await server.stop()
        if own_client:
            await api.aclose()


async def run_flush(config: AgentConfig, *, final: bool = False, client: StoreClient | None = None) -> int:
    """``memsync flush`` (push-only, bounded) or ``memsync flush --final`` (final sync, then the flush)."""
    config = _with_resolved_stores(config)
    _log_start("flush --final" if final else "flush", config)
    own_client = client is None
    api = make_client(config) if client is None else client
    agent = SyncAgent(config, api)
    try:
        outcome = await (agent.final_shutdown() if final else agent.flush())
    finally:
        if own_client:
            await api.aclose()
    write_termination_log(config, outcome.report)
    return EXIT_OK if outcome.complete else EXIT_FAILED


def _with_resolved_stores(config: AgentConfig) -> AgentConfig:
    """The stores ``memsync mount`` read from the session (``MEMSYNC_STORES=session``), else ``config``."""
    try:
        return session_stores.load_resolved(config)
    except ConfigError as exc:
        raise AgentFailure(str(exc)) from None
