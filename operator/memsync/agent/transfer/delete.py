"""Deletes, both ways: corroborated deletes sent to the store (docs/sync-semantics.md#deletes) and the removal
of local files whose memory was deleted in the store. Each returns the records of what happened; none
changes the sync state."""

from __future__ import annotations

import asyncio
import logging

from memsync.agent import messages
from memsync.agent.context import StoreContext
from memsync.agent.localfs import StoreRoot
from memsync.agent.merge import LocalRemove, RemoteDelete, Upload
from memsync.agent.records import DeleteDropped, Gone, Record
from memsync.agent.relpath import rel_to_remote
from memsync.client import errors as store_errors

logger = logging.getLogger("memsync.agent")


# --- removals of files deleted in the store -----------------------------------------------------------------


async def remove_unchanged(
    ctx: StoreContext, root: StoreRoot, removals: list[LocalRemove]
) -> tuple[list[Record], list[LocalRemove]]:
    """Deleted remotely, unchanged locally: re-hash, then remove. The records of the files removed, and the
    removals whose file changed since the scan (``recreates`` decides about those)."""

    def work() -> list[tuple[LocalRemove, bool | str]]:
        out: list[tuple[LocalRemove, bool | str]] = []
        for item in removals:
            try:
                out.append((item, root.remove_if(item.rel, item.expected_sha)))
            except OSError as exc:
                out.append((item, str(exc)))
        return out

    records: list[Record] = []
    changed: list[LocalRemove] = []
    for item, outcome in await asyncio.to_thread(work):
        if outcome is True:
            records.append(Gone(rel=item.rel))
            logger.info("memory deleted in the store; removed the local file", extra=ctx.fields(item.rel))
        elif outcome is False:
            changed.append(item)
        else:
            logger.warning("failed to remove local file", extra=ctx.fields(item.rel, error=outcome))
    return records, changed


async def recreates(ctx: StoreContext, root: StoreRoot, changed: list[LocalRemove]) -> list[Upload]:
    """Deleted remotely, edited locally since: the edit re-creates the memory (the creates to send)."""
    out: list[Upload] = []
    for item in changed:
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
        out.append(
            Upload(rel=item.rel, local_sha=sha, remote_id=None, expected_sha=None, base_sha=item.expected_sha)
        )
    return out


# --- corroborated deletes -----------------------------------------------------------------------------------


async def recheck_deletes(
    ctx: StoreContext, root: StoreRoot, deletes: list[RemoteDelete]
) -> tuple[list[Record], list[RemoteDelete]]:
    """Re-check the marker and each file's absence right before the deletes go out: the records of the
    deletions that are over (the file came back) and the deletes to send (none when the marker fails)."""
    if not deletes:
        return [], []

    def recheck() -> tuple[bool, list[bool]]:
        # A folder where the file was counts as gone (the file was replaced by a folder of its name).
        return root.marker_ok(ctx.id), [root.holds_file(d.rel) for d in deletes]

    marker_ok, present = await asyncio.to_thread(recheck)
    if not marker_ok:
        logger.warning("marker check failed right before sending deletes; holding them", extra=ctx.fields())
        return [], []
    records: list[Record] = []
    go = []
    for item, is_there in zip(deletes, present, strict=True):
        if is_there:
            records.append(DeleteDropped(rel=item.rel))  # it came back: not a deletion after all
        else:
            go.append(item)
    return records, go


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
