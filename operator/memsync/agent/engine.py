"""The sync engine: carries out the pure plans of ``merge`` against the store client and the store folder.

Concurrency (design §7): stores sync in parallel; a listing fans out over path prefixes (a ``depth=1``
listing shows a level's prefixes, which are then listed concurrently) when the store is large enough for it
to pay; content fetches run 16 at once per store and uploads 32 at once per store, in the periodic sync and
in the flush alike; a process-wide limiter caps requests in flight (64) so the server is never flooded.
Blocking filesystem work runs in worker threads, so the metrics endpoint and signal handling stay live.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from memsync.agent import messages
from memsync.agent.config import AgentConfig, StoreConfig
from memsync.agent.conflicts import keep_clash_copy, keep_local_copy
from memsync.agent.localfs import (
    NotRegularFile,
    RootMissing,
    RootReplaced,
    StoreRoot,
    UnsafePath,
    dir_identity,
    make_root,
    open_root,
    recreate_root,
    rel_to_remote,
    remote_to_rel,
    root_is_empty,
    sync_filesystem,
)
from memsync.agent.merge import (
    Clash,
    Event,
    LocalRemove,
    Pull,
    Remote,
    RemoteDelete,
    RootStatus,
    SyncInput,
    SyncPlan,
    Upload,
    flush_blocked,
    plan_flush,
    plan_sync,
    trust,
)
from memsync.agent.metrics import Metrics
from memsync.agent.recorder import Recorder
from memsync.agent.scan import HashCache, ScanResult, scan
from memsync.agent.state import LockTimeout, StoreState, load_state, save_state, store_lock
from memsync.api.constants import LIST_LIMIT_FULL_MAX, LIST_LIMIT_MAX, MARKER_FILENAME, MAX_CONTENT_BYTES
from memsync.api.hashing import sha256_bytes
from memsync.api.models import Memory, MemoryPrefix, View
from memsync.client import StoreClient
from memsync.client import errors as store_errors
from memsync.contracts.health import ERROR_LIMIT, StoreHealth
from memsync.contracts.report import SAMPLE_MAX, StoreCounts

logger = logging.getLogger("memsync.agent")

FETCH_CONCURRENCY = 16  # content fetches per store (reference §5.5 step 6)
UPLOAD_CONCURRENCY = 32  # uploads per store (reference §5.7; memsync also uses it in the periodic sync)
DELETE_CONCURRENCY = 16
GLOBAL_CONCURRENCY = 64  # requests in flight per process, all stores together
FANOUT_MIN = 100  # list a level's prefixes concurrently when the baseline holds more than this below it
_WRITE_BATCH = 64
_CHANGED_SINCE_SCAN = "the local file changed since the scan; the next sync decides"

T = TypeVar("T")
PassOutcome = Literal["synced", "recovered", "left", "failed", "skipped"]
# What became of one upload: saved (uploaded or adopted), settled otherwise (refused, lost to the store) or
# failed (to be retried: the edit is not saved yet).
UploadOutcome = Literal["saved", "settled", "failed"]


@dataclass
class PassStats:
    """Numbers of one pass (tests and the benchmark read them)."""

    outcome: PassOutcome = "synced"
    list_requests: int = 0
    fetches: int = 0
    uploads: int = 0
    deletes: int = 0
    hashed: int = 0
    changed: int = 0  # flush: files whose content differed from the baseline
    unsent: int = 0  # flush: of those, how many were neither saved nor settled (conflict, refusal)
    errors: int = 0  # transfers that failed and are retried (the pass then does not count as a success)
    transient: int = 0  # of those (or of a failed pass), the ones worth retrying before the shutdown deadline
    last_error: str | None = None
    seconds: float = 0.0


@dataclass
class _Progress:
    """Live counters of a flush, read by the command when the time budget cuts it off."""

    changed: int = 0
    settled: int = 0
    scanned: bool = False  # the flush knows what changed (``changed`` is final)

    @property
    def unsent(self) -> int:
        return max(0, self.changed - self.settled)


def is_transient(exc: BaseException) -> bool:
    """A failure that may go away by itself: no response, a timeout, 5xx, 429, the store's lock held by
    another memsync process. The shutdown passes retry these until their deadline."""
    return isinstance(
        exc,
        store_errors.TransportError | store_errors.ServerError | store_errors.RateLimited | LockTimeout,
    )


def unsaved_files(result: ScanResult, state: StoreState) -> list[str]:
    """Local files whose content the store does not hold per the baseline (refused content excepted), and
    files that cannot be read (they may hold an edit)."""
    changed = [
        rel
        for rel, sha in result.files.items()
        if state.baseline.get(rel) != sha and state.refused_shas.get(rel) != sha
    ]
    return sorted({*changed, *result.unreadable})


class Shared:
    """Per-process: the client, the global request limiter, metrics, and warnings already logged once."""

    def __init__(self, config: AgentConfig, client: StoreClient, metrics: Metrics | None = None) -> None:
        self.config = config
        self.client = client
        self.metrics = metrics if metrics is not None else Metrics()
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


class StoreSync:
    """Everything memsync does to one store: mount, periodic pass, push-only flush."""

    def __init__(self, shared: Shared, store: StoreConfig) -> None:
        self.shared = shared
        self.store = store
        self.id = store.memory_store_id
        self.path = shared.config.mount_dir(store)
        self.cache = HashCache()
        self.recorder = Recorder(self.id, shared.metrics)
        self.last = PassStats()
        self.progress = _Progress()
        self._listing = ListingCache()
        self._fetch_sem = asyncio.Semaphore(FETCH_CONCURRENCY)
        self._upload_sem = asyncio.Semaphore(UPLOAD_CONCURRENCY)
        self._delete_sem = asyncio.Semaphore(DELETE_CONCURRENCY)
        self._wrote_files = False
        self.unwritable: dict[str, str] = {}  # this pass: rel -> why a memory could not be written locally

    # --- small helpers ------------------------------------------------------------------------------------

    @property
    def client(self) -> StoreClient:
        return self.shared.client

    @property
    def config(self) -> AgentConfig:
        return self.shared.config

    def _extra(self, rel: str | None = None, **more: object) -> dict[str, object]:
        extra: dict[str, object] = {"memory_store_id": self.id}
        if rel is not None:
            extra["path"] = rel_to_remote(rel)
        extra.update(more)
        return extra

    def _log(self, event: Event) -> None:
        if event.once is not None:
            key = (self.id, *event.once)
            if key in self.shared.logged_once:
                return
            self.shared.logged_once.add(key)
        logger.log(event.level, event.message, extra=self._extra(event.rel, **event.extra))

    def _warn_once(self, message: str, rel: str | None, *key: str, **extra: object) -> None:
        self._log(Event(logging.WARNING, message, rel, once=(message, rel or "", *key), extra=extra))

    async def _api(self, call: Callable[[], Awaitable[T]]) -> T:
        async with self.shared.limiter:
            return await call()

    def _load(self) -> StoreState:
        state = load_state(self.config.state_path, self.id)
        if state is None:
            state = StoreState(memory_store_id=self.id, mount_path=self.store.mount_path)
        return state

    def _save(self, state: StoreState) -> None:
        if self._wrote_files:
            # Files written this pass reach the disk before the baseline that records them: after a
            # crash a half-written file can never look like a local edit of the recorded content.
            sync_filesystem(self.path.parent)
            self._wrote_files = False
        self.recorder.flush_into(state.totals)
        save_state(self.config.state_path, state)
        self.shared.metrics.pending_deletes.labels(self.id).set(len(state.pending_deletes))

    def _fail(self, message: str, exc: BaseException) -> None:
        """A transfer failed and will be retried: the pass is not a clean success."""
        self.last.errors += 1
        self.last.transient += is_transient(exc)
        self.last.last_error = message[:ERROR_LIMIT]

    def _note_problems(
        self,
        state: StoreState,
        result: ScanResult,
        *,
        held: list[str] | None = None,
        blocked_creates: Mapping[str, str] | None = None,
    ) -> None:
        """Refused: by the server, local names that cannot be memories, store paths that cannot be local
        files, memories that could not be written, creates that can never go; unreadable: what the scan could
        not read; held: deletions the cap held back (after a sync)."""
        refused = [
            *state.refused_shas,
            *self.unwritable,
            *result.unsyncable,
            *(p.lstrip("/") for p in state.unmappable),
            *(blocked_creates or {}),
        ]
        self.recorder.problems(state.totals, refused=refused, unreadable=result.unreadable, held=held)

    @property
    def tally(self) -> StoreCounts:
        """What the current command did to this store."""
        return self.recorder.tally

    @property
    def health(self) -> StoreHealth:
        return self.recorder.health

    # --- listing ------------------------------------------------------------------------------------------

    async def _list_level(self, *, view: View, prefix: str | None, depth: int) -> list[Memory | MemoryPrefix]:
        limit = LIST_LIMIT_FULL_MAX if view == "full" else LIST_LIMIT_MAX
        items: list[Memory | MemoryPrefix] = []
        page: str | None = None
        while True:
            result = await self._api(
                functools.partial(
                    self.client.list_memories_page,
                    self.id,
                    view=view,
                    limit=limit,
                    page=page,
                    path_prefix=prefix,
                    depth=depth,
                )
            )
            self.last.list_requests += 1
            items.extend(result.data)
            if not result.next_page or result.next_page == page:
                return items
            page = result.next_page

    async def _list_remote(self, counts: Mapping[str, int] | None) -> list[Memory]:
        """Every memory of the store (basic view) for a sync pass; ``counts`` as for ``_list_tree``.

        Conditional listing (a memsync store server extension): a one-item probe carrying the ETag of the
        last full listing answers 304 when no memory of the store changed since, and that listing is reused,
        so a no-change pass is one request. The ETag is the probe's, taken before the full listing and kept
        only once that listing succeeded: a change made during the listing makes the next probe miss, it
        can never hide. A server that sends no ETag (the hosted API) is listed in full, and not probed again.
        """
        cache = self._listing
        etag: str | None = None
        if cache.supported is not False:
            probe = await self._api(lambda: self.client.probe_memories(self.id, if_none_match=cache.etag))
            self.last.list_requests += 1
            if probe.not_modified and cache.etag is not None:
                return list(cache.memories)
            cache.supported = probe.etag is not None
            etag = probe.etag
        memories = (
            await self._list_tree(None, "basic", counts)
            if counts is not None
            else [
                i for i in await self._list_level(view="basic", prefix=None, depth=0) if isinstance(i, Memory)
            ]
        )
        if etag is not None:
            cache.etag, cache.memories = etag, tuple(memories)
        return memories

    async def _list_tree(
        self, prefix: str | None, view: View, counts: Mapping[str, int] | None
    ) -> list[Memory]:
        """Every memory under ``prefix`` (None = the whole store).

        With ``counts`` (baseline entries per directory prefix) a level holding more than FANOUT_MIN entries
        is split: a ``depth=1`` listing shows its memories and sub-prefixes, which are listed concurrently.
        Without counts (the mount) only the root is split.
        """
        key = prefix or "/"
        split = counts.get(key, 0) > FANOUT_MIN if counts is not None else prefix is None
        if not split:
            return [
                i for i in await self._list_level(view=view, prefix=prefix, depth=0) if isinstance(i, Memory)
            ]
        items = await self._list_level(view="basic", prefix=prefix, depth=1)
        memories = [i for i in items if isinstance(i, Memory)]
        prefixes = [i.path for i in items if isinstance(i, MemoryPrefix)]
        subtrees = await asyncio.gather(*(self._list_tree(p, view, counts) for p in prefixes))
        if view == "full" and memories:
            memories = await self._fetch_many(memories)
        for subtree in subtrees:
            memories.extend(subtree)
        return memories

    async def _fetch_many(self, memories: list[Memory]) -> list[Memory]:
        async def one(m: Memory) -> Memory | None:
            async with self._fetch_sem:
                try:
                    full = await self._api(lambda: self.client.get_memory(self.id, m.id, view="full"))
                except store_errors.NotFound:
                    return None
                self.last.fetches += 1
                return full

        return [m for m in await asyncio.gather(*(one(m) for m in memories)) if m is not None]

    def _map_remote(self, memories: Iterable[Memory], state: StoreState | None = None) -> dict[str, Memory]:
        """rel -> memory for every listed memory that can be a local file. The others (the marker's path, a
        segment over 255 bytes, a backslash...) are warned about with their path and, given the ``state``,
        recorded there as refused (``unmappable``) until a listing no longer shows them."""
        mapped: dict[str, Memory] = {}
        unmappable: dict[str, str] = {}
        for memory in memories:
            if memory.path == "/" + MARKER_FILENAME:
                unmappable[memory.path] = "is the store's marker file, which never syncs"
                self._warn_once(
                    "the store holds a memory at the marker file's path; skipping it",
                    None,
                    memory.path,
                    remote_path=memory.path,
                )
                continue
            try:
                rel = remote_to_rel(memory.path)
            except UnsafePath as exc:
                unmappable[memory.path] = str(exc)
                self._warn_once(
                    messages.UNSAFE_REMOTE_PATH, None, memory.path, remote_path=memory.path, reason=str(exc)
                )
                continue
            mapped[rel] = memory
        if state is not None:
            state.unmappable = unmappable
        return mapped

    @staticmethod
    def _prefix_counts(baseline: Mapping[str, str]) -> dict[str, int]:
        counts: dict[str, int] = {"/": len(baseline)}
        for rel in baseline:
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                key = "/" + "/".join(parts[:i]) + "/"
                counts[key] = counts.get(key, 0) + 1
        return counts

    # --- download (mount and recovery) --------------------------------------------------------------------

    async def download(self, root: StoreRoot, state: StoreState, *, strict: bool) -> int:
        """Write every memory into the folder; only successful writes enter the baseline.

        ``strict`` (the mount): any failure raises. Otherwise (recovery) a failed or blocked write is logged
        and left for the next pass; a path already taken locally is never overwritten.
        """
        memories = self._map_remote(await self._list_tree(None, "full", None), state)
        items = sorted(memories.items())

        def write_batch(batch: list[tuple[str, Memory]]) -> list[tuple[str, str, str]]:
            done = []
            for rel, memory in batch:
                data = (memory.content or "").encode("utf-8")
                try:
                    if not strict and root.exists(rel):
                        continue
                    root.write_bytes(rel, data)
                except OSError as exc:
                    if strict:
                        raise OSError(exc.errno, f"cannot write {memory.path}: {exc.strerror}") from None
                    self._warn_once("failed to write memory file", rel, str(exc))
                    self.unwritable[rel] = exc.strerror or str(exc)
                    continue
                self._wrote_files = True
                done.append((rel, memory.id, sha256_bytes(data)))
            return done

        batches = [items[i : i + _WRITE_BATCH] for i in range(0, len(items), _WRITE_BATCH)]
        results = await asyncio.gather(*(asyncio.to_thread(write_batch, b) for b in batches))
        count = 0
        for done in results:
            for rel, memory_id, sha in done:
                state.baseline[rel] = sha
                state.remote_ids[rel] = memory_id
                count += 1
        self.recorder.bump(downloaded=count)
        return count

    async def populate(self) -> int:
        """Mount one store into its new, empty folder: stamp the marker, download, save the baseline."""
        root = await asyncio.to_thread(open_root, self.path)
        with root:
            state = StoreState(memory_store_id=self.id, mount_path=self.store.mount_path)
            state.set_root(root.identity)
            state.set_parent(await asyncio.to_thread(dir_identity, self.path.parent))
            await asyncio.to_thread(root.write_marker, self.id)
            count = await self.download(root, state, strict=True)
        state.mounted_at = state.last_success_at = self.shared.clock()
        self._save(state)
        self.shared.metrics.set_ready(self.id, True)
        return count

    # --- the trust check (reference §5.5 step 1) ---------------------------------------------------------

    def _open_and_scan(self, state: StoreState) -> tuple[RootStatus, StoreRoot | None, ScanResult | None]:
        try:
            root = open_root(self.path, state.root_id)
        except RootMissing:
            return "missing", None, None
        except RootReplaced:
            if root_is_empty(self.path):
                return "replaced_empty", None, None
            return "replaced", None, None
        try:
            result = scan(root, self.id, self.cache)
        except BaseException:
            root.close()
            raise
        return "ok", root, result

    def _warn_blocked(self, result: ScanResult) -> None:
        for rel, why in sorted(result.blocked.items()):
            if rel in result.unreadable:  # retried every pass; counted while it lasts
                self._warn_once(messages.UNREADABLE, rel, why, reason=result.unreadable[rel])
            else:
                self._warn_once(messages.NOT_REGULAR, rel, why, kind=why)

    async def _recover(self, state: StoreState, status: RootStatus) -> PassOutcome:
        """Re-create the folder, re-stamp the marker, download again. Never deletes or uploads.

        The folder is re-created only inside the directory it was mounted into: if that parent was replaced
        (by a symlink to somewhere else, say), the store is left as found rather than written elsewhere.
        """
        parent = state.parent_id
        try:
            if parent is not None:
                root = await asyncio.to_thread(recreate_root, self.path, parent)
            elif status == "missing":  # a state saved before parents were recorded
                root, _ = await asyncio.to_thread(make_root, self.path)
            else:
                root = await asyncio.to_thread(open_root, self.path)
        except RootReplaced as exc:
            logger.warning(
                f"{messages.ROOT_REPLACED}; {messages.LEFT_AS_FOUND}",
                extra=self._extra(root=status, reason=exc.strerror or ""),
            )
            return "left"
        logger.warning(
            "the memory store folder is gone or was emptied; re-creating it and downloading the store again",
            extra=self._extra(root=status),
        )
        with root:
            state.set_root(root.identity)
            # What we last agreed on stays known (never as a reason to delete) until paths are back in the
            # baseline: if the download is cut short, an edit made after the wipe is not taken for a conflict.
            state.prior_baseline = {**state.prior_baseline, **state.baseline}
            state.baseline.clear()
            state.remote_ids.clear()
            state.pending_deletes.clear()
            state.sent_shas.clear()
            state.refused_shas.clear()
            await asyncio.to_thread(root.write_marker, self.id)
            self.cache = HashCache()
            await self.download(root, state, strict=False)
        self.shared.metrics.set_ready(self.id, True)
        return "recovered"

    # --- the periodic pass (reference §5.5) ---------------------------------------------------------------

    async def sync_pass(self, *, final: bool = False, lock_timeout: float | None = None) -> PassStats:
        """One reconcile of this store, under its lock. Raises on a store-level failure (the caller logs)."""
        self.last = PassStats()
        self.unwritable = {}
        started = time.monotonic()
        async with store_lock(self.config.state_path, self.id, wait_s=lock_timeout):
            state = self._load()
            finished = False
            try:
                self.last.outcome = await self._sync_locked(state, final=final)
                finished = True
            finally:
                # A pass that raised (or was cancelled) is not a success: the caller records its failure.
                state.last_pass_at = self.shared.clock()
                clean = finished and self.last.outcome in ("synced", "recovered") and not self.last.errors
                if clean:
                    state.last_success_at = state.last_pass_at
                    self.shared.metrics.last_success.labels(self.id).set(state.last_success_at)
                self._save(state)
            if self.last.outcome == "left":
                self.last.last_error = self.last.last_error or f"{messages.LEFT_AS_FOUND} (see the log)"
            success = state.last_success_at if clean else None
            self.recorder.outcome(self.last.outcome, self.last.last_error, success, state.totals)
        self.last.seconds = time.monotonic() - started
        self.shared.metrics.pass_seconds.labels(self.id).observe(self.last.seconds)
        self.shared.metrics.passes.labels(self.id, self.last.outcome).inc()
        self.shared.metrics.requests.set(self.client.request_count)
        return self.last

    async def _sync_locked(self, state: StoreState, *, final: bool) -> PassOutcome:
        status, root, result = await asyncio.to_thread(self._open_and_scan, state)
        if root is None or result is None:
            verdict = trust(status, False, 0, len(state.baseline))
            if verdict == "recover":
                return await self._recover(state, status)
            logger.warning(f"{messages.ROOT_REPLACED}; {messages.LEFT_AS_FOUND}", extra=self._extra())
            return "left"
        with root:
            self.last.hashed = result.hashed
            if state.root_id is None:
                state.set_root(root.identity)
            verdict = trust("ok", result.marker_ok, result.entry_count, len(state.baseline))
            if verdict == "leave":
                logger.warning(f"{messages.MARKER_BAD}; {messages.LEFT_AS_FOUND}", extra=self._extra())
                return "left"
            if verdict == "recover":
                root.close()
                return await self._recover(state, status)
            self._warn_blocked(result)
            counts = self._prefix_counts(state.baseline) if len(state.baseline) > FANOUT_MIN else None
            listed = self._map_remote(await self._list_remote(counts), state)
            plan = plan_sync(
                SyncInput(
                    remote={rel: Remote(m.id, m.content_sha256) for rel, m in listed.items()},
                    local=result.files,
                    baseline=state.baseline,
                    blocked=frozenset(result.blocked),
                    blocked_files=frozenset(result.unreadable_files),
                    refused=state.refused_shas,
                    pending=state.pending_deletes,
                    sent=state.sent_shas,
                    prior=state.prior_baseline,
                    read_only=self.store.read_only,
                    deletions=self.config.deletions,
                    now=self.shared.clock(),
                    final=final,
                    delete_window=self.config.delete_window,
                )
            )
            self._adopt(state, plan)
            await self._execute(root, state, plan)
            self._note_deferred(plan, final=final)
            self._note_problems(
                state,
                result,
                held=plan.held,
                blocked_creates=plan.deferred if self.config.deletions != "enabled" else None,
            )
        return "synced"

    def _note_deferred(self, plan: SyncPlan, *, final: bool) -> None:
        for rel, blocker in sorted(plan.deferred.items()):
            self._warn_once(
                messages.WAITS_FOR_DELETE
                if self.config.deletions == "enabled"
                else messages.BLOCKED_BY_KEPT_MEMORY,
                rel,
                blocker,
                blocker=rel_to_remote(blocker),
            )
        if final and plan.held:
            logger.warning(
                messages.HELD_AT_END.format(held=len(plan.held)),
                extra=self._extra(held=len(plan.held), paths=",".join(plan.held[:SAMPLE_MAX])),
            )

    def _adopt(self, state: StoreState, plan: SyncPlan) -> None:
        state.baseline = plan.baseline
        state.remote_ids = plan.remote_ids
        state.refused_shas = plan.refused
        state.pending_deletes = plan.pending
        state.sent_shas = plan.sent
        state.prior_baseline = plan.prior
        for event in plan.events:
            self._log(event)
        self.recorder.bump(conflicts=len(plan.conflicts))

    async def _execute(self, root: StoreRoot, state: StoreState, plan: SyncPlan) -> None:
        uploads = list(plan.uploads)
        if plan.local_removals:
            uploads.extend(await self._remove_local(root, state, plan.local_removals))
        # Deletes first: a create may need the path of a memory deleted in this pass (a file replaced by a
        # folder of the same name, or the reverse).
        await self._delete_all(root, state, plan.deletes)
        if plan.clashes:
            await asyncio.to_thread(self._yield_clashes, root, plan.clashes)
        await asyncio.gather(
            self._upload_all(root, state, uploads, progress=None),
            self._pull_all(root, state, plan.pulls),
        )

    def _yield_clashes(self, root: StoreRoot, clashes: list[Clash]) -> None:
        """The store wins a clash (``merge._yield_clashing_creates``): the local file is removed (after its
        copy is kept under ``keepLocalCopy``), so the pulls can write the store's version. A file changed
        since the scan is left for the next pass to decide."""
        keep = self.config.conflict_policy == "keepLocalCopy"
        session = self.config.session_id or "session"
        when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.shared.clock()))
        for item in clashes:
            try:
                if keep:
                    result = keep_clash_copy(
                        root, item.rel, at=item.at, local_sha=item.local_sha, session=session, when=when
                    )
                    if result.changed:
                        continue
                    if result.refused is not None or result.copy is None:
                        self._warn_once(messages.CONFLICT_COPY_REFUSED, item.rel, str(result.copy))
                        self.unwritable[item.rel] = f"{messages.CONFLICT_COPY_REFUSED}: {result.refused}"
                        continue
                    if result.created:
                        self._wrote_files = True
                        logger.warning(
                            messages.CONFLICT_COPY,
                            extra=self._extra(item.rel, copy=rel_to_remote(result.copy)),
                        )
                root.remove_if(item.rel, item.local_sha)
            except OSError as exc:
                logger.warning(
                    "local file in the way not removed", extra=self._extra(item.rel, reason=str(exc))
                )

    async def _remove_local(
        self, root: StoreRoot, state: StoreState, removals: list[LocalRemove]
    ) -> list[Upload]:
        """Deleted remotely, unchanged locally: re-hash, then remove; a file changed since is re-created."""

        def work() -> list[tuple[LocalRemove, bool | str]]:
            out: list[tuple[LocalRemove, bool | str]] = []
            for item in removals:
                try:
                    out.append((item, root.remove_if(item.rel, item.expected_sha)))
                except OSError as exc:
                    out.append((item, str(exc)))
            return out

        recreate: list[Upload] = []
        for item, outcome in await asyncio.to_thread(work):
            if outcome is True:
                state.baseline.pop(item.rel, None)
                state.remote_ids.pop(item.rel, None)
                logger.info(
                    "memory deleted in the store; removed the local file", extra=self._extra(item.rel)
                )
            elif outcome is False:
                try:
                    sha = await asyncio.to_thread(root.sha_of, item.rel)
                except OSError as exc:  # made unreadable meanwhile: left alone, the next scan decides
                    logger.warning("failed to remove local file", extra=self._extra(item.rel, error=str(exc)))
                    continue
                if sha is None:
                    continue
                if self.store.read_only:
                    self._warn_once(messages.READ_ONLY_LOCAL_EDIT, item.rel, sha)
                    continue
                logger.warning(messages.RECREATING, extra=self._extra(item.rel))
                recreate.append(Upload(item.rel, sha, None, None, item.expected_sha))
            else:
                logger.warning("failed to remove local file", extra=self._extra(item.rel, error=outcome))
        return recreate

    # --- uploads (reference §5.6) -------------------------------------------------------------------------

    def _read_for_upload(self, root: StoreRoot, upload: Upload) -> tuple[str, str] | str | OSError | None:
        """(content, sha) to send; a refusal "sha:reason" (non-UTF-8, too big); None when gone or no file; the
        error when it cannot be read now (made unreadable since the scan): not sent, the next scan decides."""
        try:
            data = root.read_bytes(upload.rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except NotRegularFile:
            return None
        except OSError as exc:
            return exc
        sha = sha256_bytes(data)
        if len(data) > MAX_CONTENT_BYTES:
            return f"{sha}:over the {MAX_CONTENT_BYTES}-byte limit ({len(data)} bytes)"
        try:
            return data.decode("utf-8"), sha
        except UnicodeDecodeError:
            return f"{sha}:not valid UTF-8"

    async def _upload_all(
        self, root: StoreRoot, state: StoreState, uploads: list[Upload], *, progress: _Progress | None
    ) -> None:
        if not uploads:
            return

        def read_all() -> list[tuple[Upload, tuple[str, str] | str | OSError | None]]:
            return [(u, self._read_for_upload(root, u)) for u in uploads]

        ready: list[tuple[Upload, str, str]] = []
        for upload, read in await asyncio.to_thread(read_all):
            if isinstance(read, OSError):  # still unsent: a flush counts it
                why = read.strerror or type(read).__name__
                self._warn_once(messages.UNREADABLE, upload.rel, why, reason=why)
                continue
            if read is None:
                if progress is not None:
                    progress.settled += 1
                continue
            if isinstance(read, str):
                sha, _, why = read.partition(":")
                self._refuse(state, upload.rel, sha, why)
                if progress is not None:
                    progress.settled += 1
                continue
            content, sha = read
            state.sent_shas[upload.rel] = sha
            ready.append((upload, content, sha))
        if not ready:
            return
        # Persist the unknown-outcome sends before any goes out: a SIGKILL mid-batch then settles them.
        self._save(state)

        async def one(upload: Upload, content: str, sha: str) -> None:
            async with self._upload_sem:
                flush_root = root if progress is not None else None
                outcome = await self._upload_one(state, upload, content, sha, flush_root)
                if progress is not None and outcome != "failed":
                    progress.settled += 1

        await asyncio.gather(*(one(u, c, s) for u, c, s in ready))

    def _refuse(self, state: StoreState, rel: str, sha: str, why: str) -> None:
        state.refused_shas[rel] = sha
        state.sent_shas.pop(rel, None)
        self._warn_once(messages.REFUSED, rel, sha, reason=why)
        self.shared.metrics.refused.labels(self.id).inc()

    def _uploaded(self, state: StoreState, rel: str, memory: Memory) -> None:
        state.baseline[rel] = memory.content_sha256
        state.remote_ids[rel] = memory.id
        state.refused_shas.pop(rel, None)
        state.sent_shas.pop(rel, None)
        self.recorder.bump(uploaded=1)
        self.last.uploads += 1

    def _lost(self, state: StoreState, rel: str, message: str = messages.UPLOAD_LOST) -> None:
        state.sent_shas.pop(rel, None)
        logger.warning(message, extra=self._extra(rel))
        self.recorder.bump(conflicts=1)

    async def _upload_one(
        self, state: StoreState, upload: Upload, content: str, sha: str, flush_root: StoreRoot | None = None
    ) -> UploadOutcome:
        rel = upload.rel
        path = rel_to_remote(rel)
        try:
            try:
                if upload.remote_id is not None:
                    remote_id = upload.remote_id
                    memory = await self._api(
                        lambda: self.client.update_memory(
                            self.id, remote_id, content=content, expected_sha256=upload.expected_sha
                        )
                    )
                else:
                    memory = await self._api(lambda: self.client.create_memory(self.id, path, content))
            except store_errors.NotFound:
                if upload.remote_id is None:
                    raise
                # Deleted since the listing: the un-pushed edit re-creates it (reference §5.6).
                memory = await self._api(lambda: self.client.create_memory(self.id, path, content))
        except store_errors.PreconditionFailed:
            self._lost(state, rel)
            if flush_root is not None and self.config.conflict_policy == "keepLocalCopy":
                await self._upload_conflict_copy(flush_root, state, rel, content, sha)
            return "settled"
        except store_errors.PathConflict as exc:
            return await self._path_conflict(state, upload, content, sha, exc)
        except store_errors.StoreError as exc:
            if exc.is_refusal:
                self._refuse(state, rel, sha, str(exc))
                return "settled"
            if not isinstance(
                exc, store_errors.TransportError | store_errors.ServerError | store_errors.RateLimited
            ):
                state.sent_shas.pop(rel, None)  # a definite answer: nothing was written
            logger.warning(messages.UPLOAD_FAILED, extra=self._extra(rel, error=str(exc)))
            self._fail(f"{messages.UPLOAD_FAILED} {path}: {exc}", exc)
            return "failed"
        self._uploaded(state, rel, memory)
        return "saved"

    async def _path_conflict(
        self, state: StoreState, upload: Upload, content: str, sha: str, exc: store_errors.PathConflict
    ) -> UploadOutcome:
        """Create refused because the path is taken: adopt our own bytes, retry on our baseline, or lose.

        The blocker may be this very upload: a create whose first attempt landed but whose response was lost
        is retried by the client and answered 409. When the blocker at our path cannot be read (the server
        did not name it, or fetching it failed), the send stays unsettled in ``sent_shas``: the next listing
        recognises our own bytes, and an edit made meanwhile is then uploaded rather than lost to them.
        """
        rel = upload.rel
        holder: Memory | None = None
        if exc.conflicting_memory_id:
            holder_id = exc.conflicting_memory_id
            with contextlib.suppress(store_errors.StoreError):
                holder = await self._api(lambda: self.client.get_memory(self.id, holder_id, view="basic"))
        if holder is None and exc.conflicting_path in (None, rel_to_remote(rel)):
            logger.info(
                "create refused: the path is already held (possibly by this upload's own earlier attempt); "
                "the next listing settles it",
                extra=self._extra(rel),
            )
            return "failed"
        if holder is None or holder.path != rel_to_remote(rel):
            state.sent_shas.pop(rel, None)
            self._warn_once(messages.PATH_TAKEN, rel, sha, blocker=exc.conflicting_path or "")
            self.recorder.bump(conflicts=1)
            return "settled"
        if holder.content_sha256 == sha:
            self._uploaded(state, rel, holder)  # the store already holds exactly these bytes
            return "saved"
        if upload.base_sha is not None and holder.content_sha256 == upload.base_sha:
            retry = Upload(rel, sha, holder.id, upload.base_sha, upload.base_sha)
            return await self._upload_one(state, retry, content, sha)
        self._lost(state, rel)
        return "settled"

    # --- corroborated deletes (reference §5.5 step 5) -----------------------------------------------------

    async def _delete_all(self, root: StoreRoot, state: StoreState, deletes: list[RemoteDelete]) -> None:
        if not deletes:
            return

        def recheck() -> tuple[bool, list[bool]]:
            # A folder where the file was counts as gone (the file was replaced by a folder of its name).
            return root.marker_ok(self.id), [root.holds_file(d.rel) for d in deletes]

        marker_ok, present = await asyncio.to_thread(recheck)
        if not marker_ok:
            logger.warning(
                "marker check failed right before sending deletes; holding them", extra=self._extra()
            )
            return

        async def one(item: RemoteDelete) -> None:
            async with self._delete_sem:
                try:
                    await self._api(
                        lambda: self.client.delete_memory(self.id, item.id, expected_sha256=item.expected_sha)
                    )
                except store_errors.NotFound:
                    pass
                except store_errors.Conflict:
                    state.pending_deletes.pop(item.rel, None)
                    logger.warning(messages.DELETE_LOST, extra=self._extra(item.rel))
                    return
                except store_errors.StoreError as exc:
                    logger.warning("failed to delete memory", extra=self._extra(item.rel, error=str(exc)))
                    self._fail(f"failed to delete memory {rel_to_remote(item.rel)}: {exc}", exc)
                    return
                else:
                    logger.info(messages.PROPAGATED_DELETE, extra=self._extra(item.rel))
                    self.recorder.bump(deleted=1)
                    self.last.deletes += 1
                state.baseline.pop(item.rel, None)
                state.remote_ids.pop(item.rel, None)
                state.pending_deletes.pop(item.rel, None)

        go = []
        for item, is_there in zip(deletes, present, strict=True):
            if is_there:
                state.pending_deletes.pop(item.rel, None)  # it came back: not a deletion after all
            else:
                go.append(item)
        await asyncio.gather(*(one(d) for d in go))

    # --- the content pass (reference §5.5 step 6) ---------------------------------------------------------

    async def _pull_all(self, root: StoreRoot, state: StoreState, pulls: list[Pull]) -> None:
        async def one(item: Pull) -> None:
            async with self._fetch_sem:
                try:
                    memory = await self._api(lambda: self.client.get_memory(self.id, item.id, view="full"))
                except store_errors.NotFound:
                    return  # deleted since the listing: the next pass reconciles
                except store_errors.StoreError as exc:
                    logger.warning("failed to download memory", extra=self._extra(item.rel, error=str(exc)))
                    self._fail(f"failed to download memory {rel_to_remote(item.rel)}: {exc}", exc)
                    return
                self.last.fetches += 1
            if memory.path != rel_to_remote(item.rel):
                return  # renamed since the listing
            data = (memory.content or "").encode("utf-8")

            def write() -> str | None:
                # Re-check right before overwriting: an edit made since the scan is never clobbered silently;
                # the next pass sees it and applies the rules (with their warnings).
                try:
                    if item.local_sha is None:  # no file was there; an empty folder may be, left by a move
                        root.remove_empty_folder(item.rel)
                    if root.sha_of(item.rel) != item.local_sha:
                        return _CHANGED_SINCE_SCAN
                    if item.conflict and self.config.conflict_policy == "keepLocalCopy":
                        problem = self._keep_local_copy(root, item)
                        if problem is not None:
                            return problem
                    root.write_bytes(item.rel, data)
                except OSError as exc:
                    return str(exc)
                self._wrote_files = True
                return None

            problem = await asyncio.to_thread(write)
            if problem is not None:
                logger.warning("memory not written to disk", extra=self._extra(item.rel, reason=problem))
                if problem is not _CHANGED_SINCE_SCAN:
                    self.unwritable[item.rel] = problem
                return
            state.baseline[item.rel] = sha256_bytes(data)
            state.remote_ids[item.rel] = memory.id
            self.recorder.bump(downloaded=1)

        await asyncio.gather(*(one(p) for p in pulls))

    def _keep_local_copy(self, root: StoreRoot, item: Pull) -> str | None:
        """``keepLocalCopy`` before a pull overwrites a losing local edit: None once the copy is there, else
        why not (the remote version is then not written either: the local edit is never lost)."""
        copy, problem = self._write_conflict_copy(root, item.rel, item.local_sha)
        return problem if copy is None else None

    def _write_conflict_copy(
        self, root: StoreRoot, rel: str, local_sha: str | None
    ) -> tuple[str | None, str | None]:
        """``keepLocalCopy``: (the conflict copy of ``rel``'s local content, None), or (None, why not)."""
        session = self.config.session_id or "session"
        result = keep_local_copy(root, rel, local_sha, session, self.shared.clock())
        if result.changed:
            return None, _CHANGED_SINCE_SCAN
        if result.refused is not None or result.copy is None:
            self._warn_once(messages.CONFLICT_COPY_REFUSED, rel, str(result.copy), reason=result.refused)
            self.unwritable[rel] = f"{messages.CONFLICT_COPY_REFUSED}: {result.copy} {result.refused}"
            return None, self.unwritable[rel]
        if result.created:
            self._wrote_files = True
            logger.warning(messages.CONFLICT_COPY, extra=self._extra(rel, copy=rel_to_remote(result.copy)))
        return result.copy, None

    async def _upload_conflict_copy(
        self, root: StoreRoot, state: StoreState, rel: str, content: str, sha: str
    ) -> None:
        """``keepLocalCopy`` in a push-only flush, whose update lost to a remote change: no later pass will
        pull the winner and keep the copy, so the losing edit is kept and uploaded as its copy now."""
        copy, _ = await asyncio.to_thread(self._write_conflict_copy, root, rel, sha)
        if copy is None or state.baseline.get(copy) == sha:
            return
        path = rel_to_remote(copy)
        try:
            memory = await self._api(lambda: self.client.create_memory(self.id, path, content))
        except store_errors.StoreError as exc:  # the copy is on disk: the next sync or flush sends it
            logger.warning(messages.UPLOAD_FAILED, extra=self._extra(copy, error=str(exc)))
            return
        self._uploaded(state, copy, memory)

    # --- the push-only flush (reference §5.7 step 4) ------------------------------------------------------

    def count_unsaved(self) -> int:
        """How many local files are not saved in the store, by a fresh scan against the saved baseline.

        For a flush that failed or was cut off before it knew: never a guess. A store whose folder cannot be
        scanned counts as one unsaved file (something may be lost, and the number cannot be known).
        """
        try:
            state = self._load()
            _, root, result = self._open_and_scan(state)
        except Exception:
            return 1
        if root is not None:
            root.close()
        if result is None:
            return 1
        return len(unsaved_files(result, state))

    async def flush_pass(self, *, lock_timeout: float | None = None) -> PassStats:
        """Upload what changed now: no listing, deletes or pulls. Skips read-only stores and bad folders."""
        self.last = PassStats()
        self.progress = _Progress()
        if self.store.read_only:
            self.last.outcome = "skipped"
            return self.last
        started = time.monotonic()
        async with store_lock(self.config.state_path, self.id, wait_s=lock_timeout):
            state = self._load()
            status, root, result = await asyncio.to_thread(self._open_and_scan, state)
            if root is None or result is None or not result.marker_ok:
                if root is not None:
                    root.close()
                logger.warning(
                    f"memory flush skipped this store: {messages.MARKER_BAD}; {messages.LEFT_AS_FOUND}",
                    extra=self._extra(root=status),
                )
                if result is not None:
                    changed = unsaved_files(result, state)
                    self.last.changed = self.last.unsent = len(changed)
                    self.tally.unsent = len(changed)
                self.last.outcome = "left"
                return self.last
            with root:
                self.last.hashed = result.hashed
                self._warn_blocked(result)
                uploads = plan_flush(
                    local=result.files,
                    baseline=state.baseline,
                    refused=state.refused_shas,
                    remote_ids=state.remote_ids,
                    read_only=False,
                    prior=state.prior_baseline,
                )
                # Files it cannot send count as changed and unsent: creates that wait for the deletion of
                # one of our memories in their way (only a sync deletes), and files it cannot read.
                blocked = flush_blocked(result.files, state.baseline)
                kept = self.config.deletions != "enabled"  # then the memory in the way never goes
                self.progress.changed = self.last.changed = (
                    len(uploads) + (0 if kept else len(blocked)) + len(result.unreadable)
                )
                self.progress.scanned = True
                try:
                    await self._upload_all(root, state, uploads, progress=self.progress)
                finally:
                    self._note_problems(state, result, blocked_creates=blocked if kept else None)
                    self._save(state)
                    self.last.unsent = self.tally.unsent = self.progress.unsent
        self.last.seconds = time.monotonic() - started
        return self.last
