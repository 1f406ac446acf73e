"""What the sync of one store works with: the process-wide ``SyncContext`` (client, settings, request limiter,
metrics, clock, warnings already logged once) and the per-store ``StoreContext`` (its folder, its recorder,
its transfer limits and its log lines). Listing, transfer and the passes take a ``StoreContext``.

Concurrency (docs/sync-semantics.md#concurrency): stores sync in parallel; content fetches run 16 at once per
store, uploads 32 and deletes 16; a process-wide limiter caps requests in flight (64) so the server is never
flooded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from memsync.agent.config import AgentConfig, StoreConfig
from memsync.agent.merge import Event
from memsync.agent.metrics import Metrics
from memsync.agent.recorder import Recorder
from memsync.agent.relpath import rel_to_remote
from memsync.api.models import Memory
from memsync.client import StoreClient

logger = logging.getLogger("memsync.agent")

FETCH_CONCURRENCY = 16  # content fetches per store (docs/sync-semantics.md#pulls)
UPLOAD_CONCURRENCY = 32  # uploads per store, in the flush and in the periodic sync
DELETE_CONCURRENCY = 16
GLOBAL_CONCURRENCY = 64  # requests in flight per process, all stores together

T = TypeVar("T")


class SyncContext:
    """Per process: the client, the settings, the global request limiter, metrics, the clock, and the
    warnings already logged once."""

    def __init__(self, config: AgentConfig, client: StoreClient, metrics: Metrics | None = None) -> None:
        self.config = config
        self.client = client
        self.metrics = metrics if metrics is not None else Metrics()
        self.metrics.requests.source = lambda: self.client.request_count
        self.limiter = asyncio.Semaphore(GLOBAL_CONCURRENCY)
        self.logged_once: set[tuple[str, ...]] = set()
        self.clock: Callable[[], float] = time.time


@dataclass
class ListingCache:
    """The last full listing of a store and the ETag it answers to (conditional listing); ``supported`` is
    None until the server has been asked, then whether it sends ETags."""

    supported: bool | None = None
    etag: str | None = None
    memories: tuple[Memory, ...] = ()


class StoreContext:
    """Per store: the process's context, the store's settings and folder, its one recorder, its transfer
    limits, and the files written since the state was last saved."""

    def __init__(self, sync: SyncContext, store: StoreConfig) -> None:
        self.sync = sync
        self.store = store
        self.id = store.memory_store_id
        self.path: Path = sync.config.mount_dir(store)
        self.recorder = Recorder(self.id, sync.metrics)
        self.fetch_sem = asyncio.Semaphore(FETCH_CONCURRENCY)
        self.upload_sem = asyncio.Semaphore(UPLOAD_CONCURRENCY)
        self.delete_sem = asyncio.Semaphore(DELETE_CONCURRENCY)
        # Files were written since the last save: they reach the disk before the baseline that records them.
        self.wrote_files = False
        self.listing = ListingCache()

    @property
    def client(self) -> StoreClient:
        return self.sync.client

    @property
    def config(self) -> AgentConfig:
        return self.sync.config

    def now(self) -> float:
        return self.sync.clock()

    async def api(self, call: Callable[[], Awaitable[T]]) -> T:
        """One request to the store, within the process-wide limit."""
        async with self.sync.limiter:
            return await call()

    def fields(self, rel: str | None = None, **more: object) -> dict[str, object]:
        """The structured fields of a log line about this store (and a path in it)."""
        extra: dict[str, object] = {"memory_store_id": self.id}
        if rel is not None:
            extra["path"] = rel_to_remote(rel)
        extra.update(more)
        return extra

    def log(self, event: Event) -> None:
        if event.once is not None:
            key = (self.id, *event.once)
            if key in self.sync.logged_once:
                return
            self.sync.logged_once.add(key)
        logger.log(event.level, event.message, extra=self.fields(event.rel, **event.extra))

    def warn_once(self, message: str, rel: str | None, *key: str, **extra: object) -> None:
        self.log(Event(logging.WARNING, message, rel, once=(message, rel or "", *key), extra=extra))
