"""The sidecar's passes until SIGTERM (docs/sync-agent.md#early-sync): one task per store runs a pass when
``memsync.agent.schedule`` says so, and a watcher over the stores' folders tells the schedule what changed.

The periodic pass is the backstop (every interval, with jitter, the first at start); early sync adds a pass
soon after a change settles. The watcher uses inotify (``watchfiles``) and ignores memsync's temp files; a
pass's own writes are sorted out by the schedule. A store folder re-created by a recovery is watched afresh.
If the folders cannot be watched, the periodic pass goes on alone (logged once a minute at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memsync.agent import schedule
from memsync.agent.recorder import PassStats
from memsync.agent.relpath import TEMP_NAME

if TYPE_CHECKING:
    from memsync.agent.config import AgentConfig
    from memsync.agent.engine import StoreSync

logger = logging.getLogger("memsync.agent")


class PassRunner(Protocol):
    """What the loop needs of the agent (``commands.SyncAgent``): settings, stores, one pass of a store."""

    config: AgentConfig
    stores: list[StoreSync]

    async def pass_of(self, engine: StoreSync) -> PassStats: ...


WATCH_STEP_MS = 50  # a batch of changes is handed over once the folder is quiet this long...
WATCH_DEBOUNCE_MS = 500  # ...or after this long in a steady stream
WATCH_RETRY_S = 60.0  # a watcher that failed starts again after this long


def wrote_locally(stats: PassStats) -> bool:
    """Whether a pass may have written into the store's folder (its writes must not start another pass)."""
    return stats.outcome == "recovered" or stats.local_writes > 0


def not_ours(_change: object, path: str) -> bool:
    """The watcher's filter: every change except memsync's own temp files."""
    return not TEMP_NAME.match(Path(path).name)


def store_of(path: str, folders: dict[str, str]) -> str | None:
    """The store whose folder holds ``path`` (``folders``: folder -> store id)."""
    for folder, store_id in folders.items():
        if path == folder or path.startswith(folder + os.sep):
            return store_id
    return None


class FinalRequest:
    """The session runner's ``POST /final``: ends the sync loop like SIGTERM does, and answers the final
    sync and flush's report once they are done (every request, however many, gets the same answer)."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.requested = False
        self._answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._delivered = asyncio.Event()

    async def request(self) -> dict[str, Any]:
        self.requested = True
        self.stop.set()
        try:
            return await asyncio.shield(self._answer)
        finally:
            self._delivered.set()

    async def answer(self, report: dict[str, Any], *, wait_s: float = 5.0) -> None:
        if not self._answer.done():
            self._answer.set_result(report)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._delivered.wait(), timeout=wait_s)


class _Either:
    """The watcher's stop event: the loop ends, or the folders are to be watched afresh."""

    def __init__(self, stop: asyncio.Event, rewatch: Callable[[], bool]) -> None:
        self.stop = stop
        self.rewatch = rewatch

    def is_set(self) -> bool:
        return self.stop.is_set() or self.rewatch()


class PassLoop:
    """Every store's passes, until ``stop`` is set; a pass in flight then is cancelled (the final sync that
    follows redoes its work: the state is saved as transfers finish)."""

    def __init__(self, agent: PassRunner, stop: asyncio.Event, *, now: Callable[[], float] = time.monotonic):
        self.agent = agent
        self.stop = stop
        self.now = now
        self.timing = schedule.Timing(early=agent.config.early_sync)
        start = now()
        self.clocks = {e.id: schedule.StoreClock(periodic_due=start) for e in agent.stores}
        self.wake = {e.id: asyncio.Event() for e in agent.stores}
        self._unwatch = asyncio.Event()  # read by the watcher's thread: set before the watcher is awaited
        self._rewatch = False  # a folder was re-created (recovery): its old watch sees nothing any more

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._store(e)) for e in self.agent.stores]
        watcher = asyncio.create_task(self._watch()) if self.timing.early else None
        try:
            await self.stop.wait()
        finally:
            self._unwatch.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if watcher is not None:
                await asyncio.gather(watcher, return_exceptions=True)

    def changed(self, paths: list[str]) -> None:
        """The watcher saw these paths change now."""
        at = self.now()
        folders = {str(e.path): e.id for e in self.agent.stores}
        for store_id in {store_of(p, folders) for p in paths} - {None}:
            assert store_id is not None
            before = self.clocks[store_id]
            self.clocks[store_id] = schedule.seen(before, at, self.timing)
            if self.clocks[store_id].changed_at != before.changed_at:
                self.wake[store_id].set()

    async def _store(self, engine: StoreSync) -> None:
        while True:
            at = schedule.next_pass_at(self.clocks[engine.id], self.timing)
            now = self.now()
            if at > now:
                self.wake[engine.id].clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake[engine.id].wait(), timeout=at - now)
                continue
            first = self.clocks[engine.id].last_start is None
            self.clocks[engine.id] = schedule.started(self.clocks[engine.id], now)
            stats = await self.agent.pass_of(engine)
            self._rewatch = self._rewatch or stats.outcome == "recovered"
            end = self.now()
            due = schedule.periodic_due(
                now,
                end,
                self.agent.config.interval,
                first=first,
                draw=random.random(),  # noqa: S311 - spreading passes, not a secret
            )
            self.clocks[engine.id] = schedule.ended(
                self.clocks[engine.id], end, wrote=wrote_locally(stats), periodic_due=due
            )

    async def _watch(self) -> None:
        import watchfiles  # noqa: PLC0415 (only the sidecar with early sync loads it)

        folders = [e.path for e in self.agent.stores]
        while not self._unwatch.is_set():
            try:
                await self._follow(watchfiles.awatch, folders)  # it ends when told to
                if self._rewatch:
                    self._rewatch = False
                    continue
            except Exception as exc:  # a folder gone, out of inotify watches: the periodic pass goes on
                logger.warning(
                    "early sync: cannot watch the stores' folders; the periodic pass goes on",
                    extra={"error": f"{type(exc).__name__}: {exc}", "retry_in": WATCH_RETRY_S},
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._unwatch.wait(), timeout=WATCH_RETRY_S)

    async def _follow(self, awatch: Callable[..., object], folders: list[Path]) -> None:
        batches = awatch(
            *folders,
            watch_filter=not_ours,
            debounce=WATCH_DEBOUNCE_MS,
            step=WATCH_STEP_MS,
            stop_event=_Either(self._unwatch, lambda: self._rewatch),
            recursive=True,
            ignore_permission_denied=True,
        )
        async for batch in batches:  # type: ignore[attr-defined]
            self.changed([path for _, path in batch])
