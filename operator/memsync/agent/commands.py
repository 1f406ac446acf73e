"""The agent's three commands as async functions: ``mount``, ``sync`` (loop, ``--once``, final shutdown) and
``flush`` (push-only, or ``--final``). The click layer (``memsync.cli.agent``) only parses options and maps
the result to an exit code; tests drive these functions in-process on the same code path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.agent import messages
from memsync.agent.config import AgentConfig
from memsync.agent.engine import PassStats, Shared, StoreSync, Tally
from memsync.agent.localfs import make_root
from memsync.agent.metrics import Metrics, MetricsServer
from memsync.agent.state import remove_state
from memsync.api.secret import WorkSecretError, decode_work_secret
from memsync.client import StoreClient
from memsync.client import errors as store_errors

logger = logging.getLogger("memsync.agent")

TERMINATION_LOG_MAX = 4000  # Kubernetes reads at most 4 KiB of the termination message
JITTER = 0.1  # each wait is interval * (1 +/- 10 %), so many Pods do not sync in step

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


class AgentFailure(Exception):
    """A command failed with a documented message (the termination log and stderr carry it)."""

    def __init__(self, message: str, store: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.store = store


# --- termination log --------------------------------------------------------------------------------------


def write_termination_log(
    config: AgentConfig | None, payload: dict[str, Any], path: Path | None = None
) -> None:
    """One line of JSON (< 4 KiB) to the termination log, written only if its directory exists."""
    target = path if path is not None else (config.termination_path if config is not None else None)
    if target is None or not target.parent.is_dir():
        return
    line = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    if len(line.encode("utf-8")) > TERMINATION_LOG_MAX and "error" in payload:
        room = TERMINATION_LOG_MAX - (len(line.encode("utf-8")) - len(str(payload["error"]).encode("utf-8")))
        payload = {**payload, "error": str(payload["error"])[: max(0, room - 8)] + "..."}
        line = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    try:
        with target.open("w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:
        logger.warning("cannot write the termination log", extra={"path": str(target), "error": str(exc)})


# --- the client ---------------------------------------------------------------------------------------------


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
            "deletions": config.deletions,
        },
    )


# --- mount ------------------------------------------------------------------------------------------------


@dataclass
class MountResult:
    memories: dict[str, int] = field(default_factory=dict)


async def mount(config: AgentConfig, *, client: StoreClient | None = None) -> MountResult:
    """Materialise every store (reference §5.4, §4.8). On any failure, remove what this command created."""
    _log_start("mount", config)
    # Refuse first, before creating anything, if anything exists at any mount path (lstat: a dangling
    # symlink counts) - memsync never deletes a folder it did not create.
    own_client = client is None
    api = make_client(config) if client is None else client  # no sessions token: fail before touching disk
    for store in config.stores:
        if os.path.lexists(config.mount_dir(store)):  # noqa: ASYNC240 (one lstat per store)
            if own_client:
                await api.aclose()
            raise AgentFailure(f"{messages.ALREADY_EXISTS}: {store.mount_path}", store.memory_store_id)
    shared = Shared(config, api)
    created: list[str] = []
    result = MountResult()
    try:
        for store in config.stores:  # create every folder first, so a permissions problem fails fast
            engine = StoreSync(shared, store)
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
            engine = StoreSync(shared, store)
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
    except AgentFailure as exc:
        logger.error(exc.message, extra={"memory_store_id": exc.store or ""})
        write_termination_log(config, {"phase": "mount_failed", "store": exc.store, "error": exc.message})
        return EXIT_FAILED
    stores = {sid: {"memories": n} for sid, n in result.memories.items()}
    write_termination_log(config, {"phase": "mounted", "stores": stores})
    return EXIT_OK


def _undo_mount(config: AgentConfig, created: list[str]) -> None:
    for path in reversed(created):
        with contextlib.suppress(OSError):
            shutil.rmtree(path)  # fd-based on Linux: never follows a symlink planted inside
    for store in config.stores:
        with contextlib.suppress(OSError):
            remove_state(config.state_path, store.memory_store_id)


# --- sync ---------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """The final shutdown's result: the termination message and the exit code."""

    complete: bool
    stores: dict[str, dict[str, int]]

    def payload(self) -> dict[str, Any]:
        return {"phase": "flushed", "complete": self.complete, "stores": self.stores}


class Agent:
    """The engines of every configured store, sharing one client, limiter and metrics."""

    def __init__(self, config: AgentConfig, client: StoreClient, metrics: Metrics | None = None) -> None:
        self.config = config
        self.client = client
        self.shared = Shared(config, client, metrics)
        self.stores = [StoreSync(self.shared, s) for s in config.stores]

    @property
    def metrics(self) -> Metrics:
        return self.shared.metrics

    async def sync_once(
        self, *, final: bool = False, lock_timeout: float | None = None
    ) -> dict[str, PassStats]:
        """One pass over every store, in parallel. A store's failure is logged; the others continue."""

        async def one(engine: StoreSync) -> PassStats:
            try:
                return await engine.sync_pass(final=final, lock_timeout=lock_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    messages.SYNC_FAILED,
                    extra={"memory_store_id": engine.id, "error": f"{type(exc).__name__}: {exc}"},
                )
                self.metrics.passes.labels(engine.id, "failed").inc()
                stats = PassStats(outcome="failed")
                engine.last = stats
                return stats

        results = await asyncio.gather(*(one(e) for e in self.stores))
        return {e.id: r for e, r in zip(self.stores, results, strict=True)}

    async def _flush_store(self, engine: StoreSync, lock_timeout: float | None) -> PassStats:
        try:
            return await engine.flush_pass(lock_timeout=lock_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning(
                "memory flush failed",
                extra={"memory_store_id": engine.id, "error": f"{type(exc).__name__}: {exc}"},
            )
            progress = engine.progress
            # Failed before its scan finished: an unknown number of edits may be unsaved, so count one.
            unsent = progress.unsent if progress.changed else 1
            engine.tally.unsent = unsent
            engine.last = PassStats(outcome="failed", changed=progress.changed, unsent=unsent)
            return engine.last

    def _reset_tallies(self) -> None:
        for engine in self.stores:
            engine.tally = Tally()

    async def flush(self) -> Outcome:
        """The preStop step: push what changed now, bounded by the flush timeout."""
        self._reset_tallies()
        await self._bounded_flush()
        return self._outcome()

    async def final_shutdown(self) -> Outcome:
        """The final sync (delete window waived, cap applied), then the push-only flush, each bounded."""
        self._reset_tallies()
        budget = self.config.flush_timeout
        task = asyncio.create_task(self.sync_once(final=True, lock_timeout=budget))
        done, _ = await asyncio.wait({task}, timeout=budget)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            logger.warning(messages.FINAL_CUT_OFF.format(ms=int(budget * 1000)))
        await self._bounded_flush()
        return self._outcome()

    async def _bounded_flush(self) -> None:
        budget = self.config.flush_timeout
        tasks = {asyncio.create_task(self._flush_store(e, budget)): e for e in self.stores}
        _, pending = await asyncio.wait(tasks, timeout=budget)
        if not pending:
            return
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        logger.warning(messages.FLUSH_CUT_OFF.format(ms=int(budget * 1000)))
        for task in pending:
            engine = tasks[task]
            progress = engine.progress
            unsent = progress.unsent if progress.changed else 1  # cut off before the scan: unknown, count one
            engine.tally.unsent = unsent
            logger.warning(
                "memory flush cut off: "
                + messages.FLUSH_UNSENT.format(unsent=unsent, changed=progress.changed),
                extra={"memory_store_id": engine.id, "unsent": unsent, "changed": progress.changed},
            )

    def _outcome(self) -> Outcome:
        stores = {e.id: e.tally.summary() for e in self.stores}
        complete = all(s["unsent"] == 0 for s in stores.values())
        for engine in self.stores:
            logger.info(
                "memory flush outcome", extra={"memory_store_id": engine.id, **engine.tally.summary()}
            )
        return Outcome(complete=complete, stores=stores)


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
    """``memsync sync``: pass every interval (with jitter) until SIGTERM, then the final shutdown.

    Returns the exit code: with ``once``, 0 unless a store failed; otherwise 0 when the final shutdown saved
    everything, else 1. Never dies on a sync error.
    """
    _log_start("sync", config)
    own_client = client is None
    api = make_client(config) if client is None else client
    agent = Agent(config, api, metrics)
    stop_event = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install_signals and not once:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_event.set)
            installed.append(sig)
    server: MetricsServer | None = None
    try:
        if config.metrics_port is not None and not once:
            server = MetricsServer(agent.metrics, port=config.metrics_port)
            await server.start()
        for engine in agent.stores:
            agent.metrics.set_ready(engine.id, False)
        if on_ready is not None:
            on_ready(agent, server)
        if once:
            results = await agent.sync_once()
            return EXIT_FAILED if any(r.outcome == "failed" for r in results.values()) else EXIT_OK
        while not stop_event.is_set():
            started = time.monotonic()
            pass_task = asyncio.create_task(agent.sync_once())
            stopper = asyncio.create_task(stop_event.wait())
            await asyncio.wait({pass_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not pass_task.done():
                pass_task.cancel()  # SIGTERM mid-pass: the final sync redoes the work, state is saved
                with contextlib.suppress(asyncio.CancelledError):
                    await pass_task
                stopper.cancel()
                break
            stopper.cancel()
            wait = config.interval * random.uniform(1 - JITTER, 1 + JITTER) - (time.monotonic() - started)  # noqa: S311
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_event.wait(), timeout=max(0.0, wait))
        logger.info("SIGTERM received: running the final sync and flush")
        outcome = await agent.final_shutdown()
        write_termination_log(config, outcome.payload())
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
    _log_start("flush --final" if final else "flush", config)
    own_client = client is None
    api = make_client(config) if client is None else client
    agent = Agent(config, api)
    try:
        outcome = await (agent.final_shutdown() if final else agent.flush())
    finally:
        if own_client:
            await api.aclose()
    write_termination_log(config, outcome.payload())
    return EXIT_OK if outcome.complete else EXIT_FAILED
