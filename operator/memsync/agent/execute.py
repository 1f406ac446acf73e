"""Carrying out one pass's transfers: each runs concurrently with its kind (bounded by the context's
semaphores), and its records go into the pass's journal the moment it finishes, so a pass cut off midway
(SIGTERM, a time budget) still saves what was done.

The transfers themselves (``transfer/``) return records and never see the journal or the saved state; the
two points where the pass must reach the state mid-batch are here: the sends of unknown outcome are saved
before any upload goes out, and a flush's conflict copy is skipped when the pass already recorded it.
"""

from __future__ import annotations

import asyncio

from memsync.agent.context import StoreContext
from memsync.agent.ledger import Ledger
from memsync.agent.localfs import StoreRoot
from memsync.agent.merge import Pull, RemoteDelete, SyncPlan, Upload
from memsync.agent.records import Record
from memsync.agent.transfer.copies import write_conflict_copy, yield_clashes
from memsync.agent.transfer.delete import delete_one, recheck_deletes, recreates, remove_unchanged
from memsync.agent.transfer.pull import fetch_pull, pulled, write_pull
from memsync.agent.transfer.upload import ReadyUpload, read_uploads, upload_copy, upload_one


class Transfers:
    """One pass's transfers over ``root``, journaled in ``ledger``."""

    def __init__(self, ctx: StoreContext, ledger: Ledger, root: StoreRoot) -> None:
        self.ctx = ctx
        self.ledger = ledger
        self.root = root

    def journal(self, records: list[Record]) -> None:
        self.ledger.journal.add(*records)

    async def sync_plan(self, plan: SyncPlan) -> None:
        """A sync plan's transfers: local removals, deletes, yielded clashes, then uploads and pulls."""
        ctx, root = self.ctx, self.root
        uploads = list(plan.uploads)
        if plan.local_removals:
            removed, changed = await remove_unchanged(ctx, root, plan.local_removals)
            self.journal(removed)
            uploads.extend(await recreates(ctx, root, changed))
        # Deletes first: a create may need the path of a memory deleted in this pass (a file replaced by a
        # folder of the same name, or the reverse).
        await self.deletes(plan.deletes)
        if plan.clashes:
            await asyncio.to_thread(yield_clashes, ctx, root, plan.clashes)
        await asyncio.gather(self.uploads(uploads, flush=False), self.pulls(plan.pulls))

    async def deletes(self, deletes: list[RemoteDelete]) -> None:
        """Re-check, then send the deletes (``ctx.delete_sem`` at once)."""
        dropped, go = await recheck_deletes(self.ctx, self.root, deletes)
        self.journal(dropped)

        async def one(item: RemoteDelete) -> None:
            async with self.ctx.delete_sem:
                self.journal(await delete_one(self.ctx, item))

        await asyncio.gather(*(one(d) for d in go))

    async def pulls(self, pulls: list[Pull]) -> None:
        await asyncio.gather(*(self.pull(p) for p in pulls))

    async def pull(self, item: Pull) -> None:
        """Fetch one memory and write it, unless the local file changed since the scan."""
        fetched = await fetch_pull(self.ctx, item)
        if fetched is None:
            return
        memory, data = fetched
        writing = asyncio.ensure_future(asyncio.to_thread(write_pull, self.ctx, self.root, item, data))
        try:
            problem = await asyncio.shield(writing)
        except asyncio.CancelledError:
            # The pass is cancelled (SIGTERM) while the file is written: the write still ends, so record it
            # before the state is saved, or the next pass takes the store's bytes on disk for a local edit
            # (and re-creates the memory if it is deleted meanwhile).
            self.journal(pulled(self.ctx, item, memory, data, await writing))
            raise
        self.journal(pulled(self.ctx, item, memory, data, problem))

    async def uploads(self, uploads: list[Upload], *, flush: bool) -> None:
        """Read the files, journal and save the sends, then upload (``ctx.upload_sem`` at once). A ``flush``
        counts its progress and keeps a losing edit's conflict copy."""
        if not uploads:
            return
        progress = self.ctx.recorder.progress if flush else None
        read = await read_uploads(self.ctx, self.root, uploads)
        self.journal(read.records)
        if progress is not None:
            progress.settled += read.settled
        if not read.ready:
            return
        # Persist the unknown-outcome sends before any goes out: a SIGKILL mid-batch then settles them.
        self.ledger.save()

        async def one(ready: ReadyUpload) -> None:
            async with self.ctx.upload_sem:
                result, records = await upload_one(self.ctx, ready.upload, ready.content, ready.sha)
                self.journal(records)
                if result == "lost" and flush and self.ctx.config.conflict_policy == "keepLocalCopy":
                    self.journal(await self.keep_losing_edit(ready))
                if progress is not None and result != "failed":
                    progress.settled += 1

        await asyncio.gather(*(one(r) for r in read.ready))

    async def keep_losing_edit(self, ready: ReadyUpload) -> list[Record]:
        """``keepLocalCopy`` in a push-only flush, whose update lost to a remote change: no later pass will
        pull the winner and keep the copy, so the losing edit is kept and uploaded as its copy now (unless
        the pass already holds that copy with these bytes)."""
        copy, _ = await asyncio.to_thread(
            write_conflict_copy, self.ctx, self.root, ready.upload.rel, ready.sha
        )
        if copy is None or self.ledger.baseline_now(copy) == ready.sha:
            return []
        return await upload_copy(self.ctx, copy, ready.content)
