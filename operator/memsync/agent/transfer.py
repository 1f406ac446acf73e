"""Moving content between the store and the folder, store to folder and deletes: the mount's and a recovery's
download, pulls, corroborated deletes, removals of files deleted in the store, and the local files that lose
a path clash (uploads are in ``upload``).

None of it changes the sync state. Each transfer returns records of what actually happened
(``memsync.agent.apply``); the batch functions put each item's records in the pass's ``Journal`` as soon as
it finishes, so a pass cut off midway still saves what was done.
"""

from __future__ import annotations

import asyncio
import logging
import time

from memsync.agent import messages
from memsync.agent.apply import DeleteDropped, Gone, Journal, Record, Written
from memsync.agent.conflicts import keep_clash_copy, keep_local_copy
from memsync.agent.context import StoreContext
from memsync.agent.listing import list_tree, map_remote
from memsync.agent.localfs import StoreRoot, rel_to_remote
from memsync.agent.merge import Clash, LocalRemove, Pull, RemoteDelete, Upload
from memsync.api.hashing import sha256_bytes
from memsync.api.models import Memory
from memsync.client import errors as store_errors

logger = logging.getLogger("memsync.agent")

WRITE_BATCH = 64
CHANGED_SINCE_SCAN = "the local file changed since the scan; the next sync decides"


# --- download (mount and recovery; docs/sync-semantics.md#mount) --------------------------------------------


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


# --- removals of files deleted in the store -----------------------------------------------------------------


async def remove_local(
    ctx: StoreContext, root: StoreRoot, removals: list[LocalRemove], journal: Journal
) -> list[Upload]:
    """Deleted remotely, unchanged locally: re-hash, then remove. A file changed since is re-created: those
    creates are returned."""

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
            journal.add(Gone(rel=item.rel))
            logger.info("memory deleted in the store; removed the local file", extra=ctx.fields(item.rel))
        elif outcome is False:
            try:
                sha = await asyncio.to_thread(root.sha_of, item.rel)
            except OSError as exc:  # made unreadable meanwhile: left alone, the next scan decides
                logger.warning("failed to remove local file", extra=ctx.fields(item.rel, error=str(exc)))
                continue
            if sha is None:
                continue
            if ctx.store.read_only:
                ctx.warn_once(messages.READ_ONLY_LOCAL_EDIT, item.rel, sha)
                continue
            logger.warning(messages.RECREATING, extra=ctx.fields(item.rel))
            recreate.append(
                Upload(
                    rel=item.rel, local_sha=sha, remote_id=None, expected_sha=None, base_sha=item.expected_sha
                )
            )
        else:
            logger.warning("failed to remove local file", extra=ctx.fields(item.rel, error=outcome))
    return recreate


# --- corroborated deletes (docs/sync-semantics.md#deletes) --------------------------------------------------


async def delete_all(
    ctx: StoreContext, root: StoreRoot, deletes: list[RemoteDelete], journal: Journal
) -> None:
    """Re-check the marker and each file's absence, then send the deletes (16 at once)."""
    if not deletes:
        return

    def recheck() -> tuple[bool, list[bool]]:
        # A folder where the file was counts as gone (the file was replaced by a folder of its name).
        return root.marker_ok(ctx.id), [root.holds_file(d.rel) for d in deletes]

    marker_ok, present = await asyncio.to_thread(recheck)
    if not marker_ok:
        logger.warning("marker check failed right before sending deletes; holding them", extra=ctx.fields())
        return
    go = []
    for item, is_there in zip(deletes, present, strict=True):
        if is_there:
            journal.add(DeleteDropped(rel=item.rel))  # it came back: not a deletion after all
        else:
            go.append(item)

    async def one(item: RemoteDelete) -> None:
        async with ctx.delete_sem:
            journal.add(*await delete_one(ctx, item))

    await asyncio.gather(*(one(d) for d in go))


async def delete_one(ctx: StoreContext, item: RemoteDelete) -> list[Record]:
    try:
        await ctx.api(lambda: ctx.client.delete_memory(ctx.id, item.id, expected_sha256=item.expected_sha))
    except store_errors.NotFound:
        pass
    except store_errors.Conflict:
        logger.warning(messages.DELETE_LOST, extra=ctx.fields(item.rel))
        return [DeleteDropped(rel=item.rel)]
    except store_errors.StoreError as exc:
        logger.warning("failed to delete memory", extra=ctx.fields(item.rel, error=str(exc)))
        ctx.recorder.fail(f"failed to delete memory {rel_to_remote(item.rel)}: {exc}", exc)
        return []
    else:
        logger.info(messages.PROPAGATED_DELETE, extra=ctx.fields(item.rel))
        ctx.recorder.bump(deleted=1)
    return [Gone(rel=item.rel)]


# --- pulls (docs/sync-semantics.md#pulls) -------------------------------------------------------------------


async def pull_all(ctx: StoreContext, root: StoreRoot, pulls: list[Pull], journal: Journal) -> None:
    await asyncio.gather(*(pull_one(ctx, root, p, journal) for p in pulls))


async def pull_one(ctx: StoreContext, root: StoreRoot, item: Pull, journal: Journal) -> None:
    """Fetch one memory and write it, unless the local file changed since the scan; journal the write."""
    async with ctx.fetch_sem:
        try:
            memory = await ctx.api(lambda: ctx.client.get_memory(ctx.id, item.id, view="full"))
        except store_errors.NotFound:
            return  # deleted since the listing: the next pass reconciles
        except store_errors.StoreError as exc:
            logger.warning("failed to download memory", extra=ctx.fields(item.rel, error=str(exc)))
            ctx.recorder.fail(f"failed to download memory {rel_to_remote(item.rel)}: {exc}", exc)
            return
        ctx.recorder.fetched()
    if memory.path != rel_to_remote(item.rel):
        return  # renamed since the listing
    data = (memory.content or "").encode("utf-8")

    def write() -> str | None:
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

    def record(problem: str | None) -> None:
        if problem is not None:
            logger.warning("memory not written to disk", extra=ctx.fields(item.rel, reason=problem))
            if problem is not CHANGED_SINCE_SCAN:
                ctx.recorder.unwritable[item.rel] = problem
            return
        ctx.recorder.bump(downloaded=1)
        journal.add(Written(rel=item.rel, sha=sha256_bytes(data), memory_id=memory.id))

    writing = asyncio.ensure_future(asyncio.to_thread(write))
    try:
        problem = await asyncio.shield(writing)
    except asyncio.CancelledError:
        # The pass is cancelled (SIGTERM) while the file is written: the write still ends, so record it before
        # the state is saved, or the next pass takes the store's bytes on disk for a local edit (and
        # re-creates the memory if it is deleted meanwhile).
        record(await writing)
        raise
    record(problem)


# --- conflict copies and path clashes (docs/sync-semantics.md#conflicts) ------------------------------------


def write_conflict_copy(
    ctx: StoreContext, root: StoreRoot, rel: str, local_sha: str | None
) -> tuple[str | None, str | None]:
    """``keepLocalCopy``: (the conflict copy of ``rel``'s local content, None), or (None, why not)."""
    session = ctx.config.session_id or "session"
    result = keep_local_copy(root, rel, local_sha, session, ctx.now())
    if result.changed:
        return None, CHANGED_SINCE_SCAN
    if result.refused is not None or result.copy is None:
        ctx.warn_once(messages.CONFLICT_COPY_REFUSED, rel, str(result.copy), reason=result.refused)
        ctx.recorder.unwritable[rel] = f"{messages.CONFLICT_COPY_REFUSED}: {result.copy} {result.refused}"
        return None, ctx.recorder.unwritable[rel]
    if result.created:
        ctx.wrote_files = True
        logger.warning(messages.CONFLICT_COPY, extra=ctx.fields(rel, copy=rel_to_remote(result.copy)))
    return result.copy, None


def yield_clashes(ctx: StoreContext, root: StoreRoot, clashes: list[Clash]) -> None:
    """The store wins a clash (``merge._yield_clashing_creates``): the local file is removed (after its copy
    is kept under ``keepLocalCopy``), so the pulls can write the store's version. A file changed since the
    scan is left for the next pass to decide. (Blocking: run it in a worker thread.)"""
    keep = ctx.config.conflict_policy == "keepLocalCopy"
    session = ctx.config.session_id or "session"
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ctx.now()))
    for item in clashes:
        try:
            if keep:
                result = keep_clash_copy(
                    root, item.rel, at=item.at, local_sha=item.local_sha, session=session, when=when
                )
                if result.changed:
                    continue
                if result.refused is not None or result.copy is None:
                    ctx.warn_once(messages.CONFLICT_COPY_REFUSED, item.rel, str(result.copy))
                    ctx.recorder.unwritable[item.rel] = f"{messages.CONFLICT_COPY_REFUSED}: {result.refused}"
                    continue
                if result.created:
                    ctx.wrote_files = True
                    logger.warning(
                        messages.CONFLICT_COPY, extra=ctx.fields(item.rel, copy=rel_to_remote(result.copy))
                    )
            root.remove_if(item.rel, item.local_sha)
        except OSError as exc:
            logger.warning("local file in the way not removed", extra=ctx.fields(item.rel, reason=str(exc)))
