"""The passes over one store: the mount, the periodic sync and the push-only flush.

Each pass loads the saved state under the store's lock, checks the folder
(docs/sync-semantics.md#the-trust-check), asks ``merge`` for a plan, has ``listing`` and
``execute`` (over ``transfer/``) carry it out, and saves: the records of what happened go through
``apply.apply_outcomes``, the one place the state changes, and the state's invariants are checked before every
save. Blocking filesystem work runs in worker threads, so the metrics endpoint and signal handling stay live.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from memsync.agent import messages
from memsync.agent.config import StoreConfig
from memsync.agent.context import StoreContext, SyncContext
from memsync.agent.execute import Transfers
from memsync.agent.folder import count_unsaved, open_and_scan, unsaved_files, warn_blocked
from memsync.agent.ledger import Ledger
from memsync.agent.listing import list_for_sync, map_remote
from memsync.agent.localfs import RootReplaced, dir_identity, make_root, open_root, recreate_root
from memsync.agent.merge import (
    Remote,
    RootStatus,
    SyncInput,
    SyncPlan,
    flush_blocked,
    plan_flush,
    plan_sync,
    trust,
)
from memsync.agent.recorder import CLEAN_OUTCOMES, FlushProgress, PassOutcome, PassStats, Recorder
from memsync.agent.records import (
    Mounted,
    Noted,
    PassEnded,
    Planned,
    Recovering,
    RootSeen,
)
from memsync.agent.relpath import rel_to_remote
from memsync.agent.scan import HashCache, ScanResult
from memsync.agent.state import store_lock
from memsync.agent.transfer.pull import download
from memsync.contracts.health import StoreHealth
from memsync.contracts.report import SAMPLE_MAX, StoreCounts

logger = logging.getLogger("memsync.agent")


class StoreSync:
    """Everything memsync does to one store: mount, periodic pass, push-only flush."""

    def __init__(self, context: SyncContext, store: StoreConfig) -> None:
        self.ctx = StoreContext(context, store)
        self.store = store
        self.id = store.memory_store_id
        self.path = self.ctx.path
        self.cache = HashCache()
        self.ledger = Ledger(self.ctx)

    # --- what the current command did ---------------------------------------------------------------------

    @property
    def recorder(self) -> Recorder:
        return self.ctx.recorder

    @property
    def last(self) -> PassStats:
        return self.recorder.last

    @last.setter
    def last(self, stats: PassStats) -> None:
        self.recorder.last = stats

    @property
    def progress(self) -> FlushProgress:
        return self.recorder.progress

    @property
    def tally(self) -> StoreCounts:
        return self.recorder.tally

    @property
    def health(self) -> StoreHealth:
        return self.recorder.health

    def _note_problems(
        self,
        result: ScanResult,
        *,
        held: list[str] | None = None,
        blocked_creates: Mapping[str, str] | None = None,
    ) -> None:
        """Refused: by the server, local names that cannot be memories, store paths that cannot be local
        files, memories that could not be written, creates that can never go; unreadable: what the scan could
        not read; held: deletions the cap held back (after a sync)."""
        state = self.ledger.apply()
        refused = [
            *state.refused_shas,
            *self.recorder.unwritable,
            *result.unsyncable,
            *(p.lstrip("/") for p in state.unmappable),
            *(blocked_creates or {}),
        ]
        noted = self.recorder.problems(refused=refused, unreadable=result.unreadable, held=held)
        self.ledger.journal.add(Noted(problems=noted))

    # --- the mount (docs/sync-semantics.md#mount) ---------------------------------------------------------

    async def populate(self) -> int:
        """Mount one store into its new, empty folder: stamp the marker, download, save the baseline."""
        root = await asyncio.to_thread(open_root, self.path)
        self.ledger.begin(self.ledger.fresh())
        with root:
            identity = root.identity
            parent = await asyncio.to_thread(dir_identity, self.path.parent)
            await asyncio.to_thread(root.write_marker, self.id)
            count, records = await download(self.ctx, root, strict=True)
        self.ledger.journal.add(*records, Mounted(root=identity, parent=parent, at=self.ctx.now()))
        self.ledger.save()
        self.ctx.sync.metrics.set_ready(self.id, True)
        return count

    # --- the trust check (docs/sync-semantics.md#the-trust-check) ----------------------------------------

    async def _recover(self, status: RootStatus) -> PassOutcome:
        """Re-create the folder, re-stamp the marker, download again. Never deletes or uploads.

        The folder is re-created only inside the directory it was mounted into: if that parent was replaced
        (by a symlink to somewhere else, say), the store is left as found rather than written elsewhere.
        """
        parent = self.ledger.state.parent_id
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
                extra=self.ctx.fields(root=status, reason=exc.strerror or ""),
            )
            return "left"
        logger.warning(
            "the memory store folder is gone or was emptied; re-creating it and downloading the store again",
            extra=self.ctx.fields(root=status),
        )
        with root:
            self.ledger.journal.add(Recovering(root=root.identity))
            await asyncio.to_thread(root.write_marker, self.id)
            self.cache = HashCache()
            _, records = await download(self.ctx, root, strict=False)
            self.ledger.journal.add(*records)
        self.ctx.sync.metrics.set_ready(self.id, True)
        return "recovered"

    # --- the periodic pass (docs/sync-semantics.md#three-way-merge) ---------------------------------------

    async def sync_pass(self, *, final: bool = False, lock_timeout: float | None = None) -> PassStats:
        """One reconcile of this store, under its lock. Raises on a store-level failure (the caller logs)."""
        rec, metrics = self.recorder, self.ctx.sync.metrics
        rec.start_pass()
        started = time.monotonic()
        async with store_lock(self.ctx.config.state_path, self.id, wait_s=lock_timeout):
            self.ledger.begin(self.ledger.load())
            finished = False
            try:
                rec.last.outcome = await self._sync_locked(final=final)
                finished = True
            finally:
                # A pass that raised (or was cancelled) is not a success: the caller records its failure.
                at = self.ctx.now()
                clean = finished and rec.last.outcome in CLEAN_OUTCOMES and not rec.last.errors
                self.ledger.journal.add(PassEnded(at=at, clean=clean))
                if clean:
                    metrics.last_success.labels(self.id).set(at)
                self.ledger.save()
            if rec.last.outcome == "left":
                rec.last.last_error = rec.last.last_error or f"{messages.LEFT_AS_FOUND} (see the log)"
            success = self.ledger.state.last_success_at if clean else None
            rec.outcome(rec.last.outcome, rec.last.last_error, success, self.ledger.state.totals)
        rec.last.seconds = time.monotonic() - started
        metrics.pass_seconds.labels(self.id).observe(rec.last.seconds)
        metrics.passes.labels(self.id, rec.last.outcome).inc()
        return rec.last

    async def _sync_locked(self, *, final: bool) -> PassOutcome:
        state = self.ledger.state
        status, root, result = await asyncio.to_thread(open_and_scan, self.ctx, state, self.cache)
        if root is None or result is None:
            verdict = trust(status, False, 0, len(state.baseline))
            if verdict == "recover":
                return await self._recover(status)
            logger.warning(f"{messages.ROOT_REPLACED}; {messages.LEFT_AS_FOUND}", extra=self.ctx.fields())
            return "left"
        with root:
            self.recorder.last.hashed = result.hashed
            if state.root_id is None:
                self.ledger.journal.add(RootSeen(root=root.identity))
            verdict = trust("ok", result.marker_ok, result.entry_count, len(state.baseline))
            if verdict == "leave":
                logger.warning(f"{messages.MARKER_BAD}; {messages.LEFT_AS_FOUND}", extra=self.ctx.fields())
                return "left"
            if verdict == "recover":
                root.close()
                return await self._recover(status)
            warn_blocked(self.ctx, result)
            listed, listed_record = map_remote(self.ctx, await list_for_sync(self.ctx, state.baseline))
            self.ledger.journal.add(listed_record)
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
                    deletions=self.ctx.config.deletions,
                    now=self.ctx.now(),
                    final=final,
                    delete_window=self.ctx.config.delete_window,
                )
            )
            self.ledger.journal.add(Planned.of(plan))
            for event in plan.events:
                self.ctx.log(event)
            self.recorder.bump(conflicts=len(plan.conflicts))
            self.recorder.last.local_writes = (
                len(plan.pulls) + len(plan.local_removals) + len(plan.conflicts) + len(plan.clashes)
            )
            try:
                await Transfers(self.ctx, self.ledger, root).sync_plan(plan)
            finally:  # also when the final sync is cut off mid-transfer: what it holds back is still reported
                self._note_deferred(plan, final=final)
                self._note_problems(
                    result,
                    held=plan.held,
                    blocked_creates=plan.deferred if self.ctx.config.deletions != "enabled" else None,
                )
        return "synced"

    def _note_deferred(self, plan: SyncPlan, *, final: bool) -> None:
        for rel, blocker in sorted(plan.deferred.items()):
            self.ctx.warn_once(
                messages.WAITS_FOR_DELETE
                if self.ctx.config.deletions == "enabled"
                else messages.BLOCKED_BY_KEPT_MEMORY,
                rel,
                blocker,
                blocker=rel_to_remote(blocker),
            )
        if final and plan.held:
            logger.warning(
                messages.HELD_AT_END.format(held=len(plan.held)),
                extra=self.ctx.fields(held=len(plan.held), paths=",".join(plan.held[:SAMPLE_MAX])),
            )

    # --- the push-only flush (docs/sync-semantics.md#sync-flush-and-the-final-shutdown) -------------------

    def count_unsaved(self) -> int:
        """How many local files the store does not hold (``folder.count_unsaved``). Blocking."""
        return count_unsaved(self.ctx, self.cache)

    async def flush_pass(self, *, lock_timeout: float | None = None) -> PassStats:
        """Upload what changed now: no listing, deletes or pulls. Skips read-only stores and bad folders."""
        rec = self.recorder
        rec.start_flush()
        if self.store.read_only:
            rec.last.outcome = "skipped"
            return rec.last
        started = time.monotonic()
        async with store_lock(self.ctx.config.state_path, self.id, wait_s=lock_timeout):
            self.ledger.begin(self.ledger.load())
            state = self.ledger.state
            status, root, result = await asyncio.to_thread(open_and_scan, self.ctx, state, self.cache)
            if root is None or result is None or not result.marker_ok:
                if root is not None:
                    root.close()
                logger.warning(
                    f"memory flush skipped this store: {messages.MARKER_BAD}; {messages.LEFT_AS_FOUND}",
                    extra=self.ctx.fields(root=status),
                )
                if result is not None:
                    changed = unsaved_files(result, state)
                    rec.last.changed = rec.last.unsent = len(changed)
                    rec.tally.unsent = len(changed)
                rec.last.outcome = "left"
                return rec.last
            with root:
                rec.last.hashed = result.hashed
                warn_blocked(self.ctx, result)
                uploads = plan_flush(
                    local=result.files,
                    baseline=state.baseline,
                    refused=state.refused_shas,
                    remote_ids=state.remote_ids,
                    read_only=False,
                    prior=state.prior_baseline,
                )
                # Files it cannot send count as changed and unsent: creates that wait for the deletion of one
                # of our memories in their way (only a sync deletes), and files it cannot read.
                blocked = flush_blocked(result.files, state.baseline)
                kept = self.ctx.config.deletions != "enabled"  # then the memory in the way never goes
                rec.progress.changed = rec.last.changed = (
                    len(uploads) + (0 if kept else len(blocked)) + len(result.unreadable)
                )
                rec.progress.scanned = True
                try:
                    await Transfers(self.ctx, self.ledger, root).uploads(uploads, flush=True)
                finally:
                    self._note_problems(result, blocked_creates=blocked if kept else None)
                    self.ledger.save()
                    rec.last.unsent = rec.tally.unsent = rec.progress.unsent
        rec.last.seconds = time.monotonic() - started
        return rec.last
