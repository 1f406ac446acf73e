"""Store to folder: the mount's and a recovery's download of every memory, and pulls of memories changed in
the store (docs/sync-semantics.md#mount, docs/sync-semantics.md#pulls). Each returns the records of what was
written; none changes the sync state."""

from __future__ import annotations

import asyncio
import logging

from memsync.agent.context import StoreContext
from memsync.agent.listing import list_tree, map_remote
from memsync.agent.localfs import StoreRoot
from memsync.agent.merge import Pull
from memsync.agent.records import Record, Written
from memsync.agent.relpath import rel_to_remote
from memsync.agent.transfer.copies import CHANGED_SINCE_SCAN, write_conflict_copy
from memsync.api.hashing import sha256_bytes
from memsync.api.models import Memory
from memsync.client import errors as store_errors

logger = logging.getLogger("memsync.agent")

WRITE_BATCH = 64


async def download(ctx: StoreContext, root: StoreRoot, *, strict: bool) -> tuple[int, list[Record]]:
    """Write every memory into the folder: (how many were written, their records). Only successful writes
    are recorded.

    ``strict`` (the mount): any failure raises. Otherwise (recovery) a failed or blocked write is logged and
    left for the next pass; a path already taken locally is never overwritten.
    """
    memories, listed = map_remote(ctx, await list_tree(ctx, None, "full", None))
    items = sorted(memories.items())

    def write_batch(batch: list[tuple[str, Memory]]) -> list[Written]:
        done = []
        for rel, memory in batch:
            data = (memory.content or "").encode("utf-8")
            try:
                if strict:
                    root.write_bytes(rel, data)
                elif not root.replace_if(rel, data, None):
                    continue  # a local file is there (or was created meanwhile): the next pass decides
            except OSError as exc:
                if strict:
                    raise OSError(exc.errno, f"cannot write {memory.path}: {exc.strerror}") from None
                ctx.warn_once("failed to write memory file", rel, str(exc))
                ctx.recorder.unwritable[rel] = exc.strerror or str(exc)
                continue
            ctx.wrote_files = True
            done.append(Written(rel=rel, sha=sha256_bytes(data), memory_id=memory.id))
        return done

    batches = [items[i : i + WRITE_BATCH] for i in range(0, len(items), WRITE_BATCH)]
    results = await asyncio.gather(*(asyncio.to_thread(write_batch, b) for b in batches))
    written = [w for done in results for w in done]
    ctx.recorder.bump(downloaded=len(written))
    return len(written), [listed, *written]


# --- pulls ------------------------------------------------------------------------------------------------


async def fetch_pull(ctx: StoreContext, item: Pull) -> tuple[Memory, bytes] | None:
    """The memory to pull and its bytes; None when there is nothing to write (deleted or renamed since the
    listing, or the fetch failed: the next pass reconciles)."""
    async with ctx.fetch_sem:
        try:
            memory = await ctx.api(lambda: ctx.client.get_memory(ctx.id, item.id, view="full"))
        except store_errors.NotFound:
            return None  # deleted since the listing: the next pass reconciles
        except store_errors.StoreError as exc:
            logger.warning("failed to download memory", extra=ctx.fields(item.rel, error=str(exc)))
            ctx.recorder.fail(f"failed to download memory {rel_to_remote(item.rel)}: {exc}", exc)
            return None
        ctx.recorder.fetched()
    if memory.path != rel_to_remote(item.rel):
        return None  # renamed since the listing
    return memory, (memory.content or "").encode("utf-8")


def write_pull(ctx: StoreContext, root: StoreRoot, item: Pull, data: bytes) -> str | None:
    """Write a pulled memory unless the local file changed since the scan; None, or why it was not written.
    (Blocking: run it in a worker thread.)"""
    # Re-check right before overwriting: an edit made since the scan is never clobbered silently; the next
    # pass sees it and applies the rules (with their warnings).
    try:
        if item.local_sha is None:  # no file was there; an empty folder may be, left by a move
            root.remove_empty_folder(item.rel)
        if item.conflict and ctx.config.conflict_policy == "keepLocalCopy":
            if root.sha_of(item.rel) != item.local_sha:
                return CHANGED_SINCE_SCAN  # before any copy of content that is no longer there
            copy, problem = write_conflict_copy(ctx, root, item.rel, item.local_sha)
            if copy is None:
                return problem
        # replace_if re-hashes first: the one check of an ordinary pull
        if not root.replace_if(item.rel, data, item.local_sha):
            return CHANGED_SINCE_SCAN  # edited or deleted during the download: never undone
    except OSError as exc:
        return str(exc)
    ctx.wrote_files = True
    return None


def pulled(ctx: StoreContext, item: Pull, memory: Memory, data: bytes, problem: str | None) -> list[Record]:
    """The records of one pull's write (``problem``: why it was not written, or None)."""
    if problem is not None:
        logger.warning("memory not written to disk", extra=ctx.fields(item.rel, reason=problem))
        if problem is not CHANGED_SINCE_SCAN:
            ctx.recorder.unwritable[item.rel] = problem
        return []
    ctx.recorder.bump(downloaded=1)
    return [Written(rel=item.rel, sha=sha256_bytes(data), memory_id=memory.id)]
