"""Uploads, folder to store (docs/sync-semantics.md#uploads-and-preconditions): creates, updates conditional
on the sha the plan expects, path conflicts settled against our own bytes, and ``keepLocalCopy``'s copy of an
edit that lost in a push-only flush.

Like every transfer it changes no state: reading the files and each upload return their records
(``memsync.agent.records``), which the engine journals as each upload finishes. The engine saves the sends of
unknown outcome before any goes out, so a SIGKILL mid-batch settles them at the next listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Literal

from memsync.agent import messages
from memsync.agent.context import StoreContext
from memsync.agent.localfs import NotRegularFile, StoreRoot
from memsync.agent.merge import Upload
from memsync.agent.records import Record, Refused, Sending, SendSettled, Uploaded
from memsync.agent.relpath import rel_to_remote
from memsync.api.constants import MAX_CONTENT_BYTES
from memsync.api.hashing import sha256_bytes
from memsync.api.models import Memory
from memsync.client import errors as store_errors

logger = logging.getLogger("memsync.agent")

# What became of one upload: saved (uploaded or adopted), settled otherwise (refused, lost to the store) or
# failed (to be retried: the edit is not saved yet).
UploadResult = Literal["saved", "settled", "failed"]
Read = tuple[str, str] | str | OSError | None


def _clashes(path: str, other: str) -> bool:
    """Two memory paths that cannot both be in a store: one is an ancestor folder of the other."""
    return other.startswith(path + "/") or path.startswith(other + "/")


def read_for_upload(root: StoreRoot, upload: Upload) -> Read:
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


def refuse(ctx: StoreContext, rel: str, sha: str, why: str, *, by_server: bool) -> Refused:
    """Content refused for good: by the server (400, 413) or by the local checks before sending."""
    ctx.warn_once(messages.REFUSED if by_server else messages.LOCAL_REFUSED, rel, sha, reason=why)
    ctx.recorder.refused()
    return Refused(rel=rel, sha=sha)


@dataclass(frozen=True)
class ReadyUpload:
    """A file read for sending: its content and the sha of exactly those bytes."""

    upload: Upload
    content: str
    sha: str


@dataclass
class ReadUploads:
    """What reading the files to upload found: the records of the sends about to go out and of the
    refusals, the uploads ready to send, and how many need no send (gone, or refused)."""

    records: list[Record] = field(default_factory=list)
    ready: list[ReadyUpload] = field(default_factory=list)
    settled: int = 0


async def read_uploads(ctx: StoreContext, root: StoreRoot, uploads: list[Upload]) -> ReadUploads:
    """Read every file to upload (in a worker thread). A file that cannot be read now is left unsent (the
    next scan decides); one the store would refuse (not UTF-8, too big) is refused here."""

    def read_all() -> list[tuple[Upload, Read]]:
        return [(u, read_for_upload(root, u)) for u in uploads]

    out = ReadUploads()
    for upload, read in await asyncio.to_thread(read_all):
        if isinstance(read, OSError):  # still unsent: a flush counts it
            why = read.strerror or type(read).__name__
            ctx.warn_once(messages.UNREADABLE, upload.rel, why, reason=why)
            continue
        if read is None:
            out.settled += 1
            continue
        if isinstance(read, str):
            sha, _, why = read.partition(":")
            out.records.append(refuse(ctx, upload.rel, sha, why, by_server=False))
            out.settled += 1
            continue
        content, sha = read
        out.records.append(Sending(rel=upload.rel, sha=sha))
        out.ready.append(ReadyUpload(upload, content, sha))
    return out


def uploaded(ctx: StoreContext, rel: str, memory: Memory) -> Uploaded:
    ctx.recorder.bump(uploaded=1)
    return Uploaded(rel=rel, sha=memory.content_sha256, memory_id=memory.id)


def lost(ctx: StoreContext, rel: str) -> SendSettled:
    """The update lost to a change in the store (the store wins)."""
    logger.warning(messages.UPLOAD_LOST, extra=ctx.fields(rel))
    ctx.recorder.bump(conflicts=1)
    return SendSettled(rel=rel)


async def upload_one(
    ctx: StoreContext, upload: Upload, content: str, sha: str
) -> tuple[UploadResult | Literal["lost"], list[Record]]:
    """Send one file: what became of it ("lost": settled, lost to a remote change) and its records."""
    rel = upload.rel
    path = rel_to_remote(rel)
    try:
        try:
            if upload.remote_id is not None:
                remote_id = upload.remote_id
                memory = await ctx.api(
                    lambda: ctx.client.update_memory(
                        ctx.id, remote_id, content=content, expected_sha256=upload.expected_sha
                    )
                )
            else:
                memory = await ctx.api(lambda: ctx.client.create_memory(ctx.id, path, content))
        except store_errors.NotFound:
            if upload.remote_id is None:
                raise
            # Deleted since the listing: the un-pushed edit re-creates it
            # (docs/sync-semantics.md#three-way-merge).
            memory = await ctx.api(lambda: ctx.client.create_memory(ctx.id, path, content))
    except store_errors.PreconditionFailed:
        return "lost", [lost(ctx, rel)]
    except store_errors.PathConflict as exc:
        return await path_conflict(ctx, upload, content, sha, exc)
    except store_errors.StoreError as exc:
        if exc.is_refusal:
            return "settled", [refuse(ctx, rel, sha, str(exc), by_server=True)]
        records: list[Record] = []
        if not isinstance(
            exc, store_errors.TransportError | store_errors.ServerError | store_errors.RateLimited
        ):
            records.append(SendSettled(rel=rel))  # a definite answer: nothing was written
        logger.warning(messages.UPLOAD_FAILED, extra=ctx.fields(rel, error=str(exc)))
        ctx.recorder.fail(f"{messages.UPLOAD_FAILED} {path}: {exc}", exc)
        return "failed", records
    return "saved", [uploaded(ctx, rel, memory)]


async def path_conflict(
    ctx: StoreContext, upload: Upload, content: str, sha: str, exc: store_errors.PathConflict
) -> tuple[UploadResult, list[Record]]:
    """Create refused because the path is taken: adopt our own bytes, retry on our baseline, or lose.

    The blocker may be this very upload: a create whose first attempt landed but whose response was lost is
    retried by the client and answered 409. When the blocker at our path cannot be read (the server did not
    name it, or fetching it failed), the send stays unsettled in ``sent_shas``: the next listing recognises
    our own bytes, and an edit made meanwhile is then uploaded rather than lost to them.
    """
    rel = upload.rel
    holder: Memory | None = None
    if exc.conflicting_memory_id:
        holder_id = exc.conflicting_memory_id
        with contextlib.suppress(store_errors.StoreError):
            holder = await ctx.api(lambda: ctx.client.get_memory(ctx.id, holder_id, view="basic"))
    if holder is None and exc.conflicting_path in (None, rel_to_remote(rel)):
        logger.info(
            "create refused: the path is already held (possibly by this upload's own earlier attempt); "
            "the next listing settles it",
            extra=ctx.fields(rel),
        )
        return "failed", []
    if holder is None or holder.path != rel_to_remote(rel):
        blocker = holder.path if holder is not None else exc.conflicting_path or ""
        if _clashes(rel_to_remote(rel), blocker):
            # A memory below our path (a folder there) or at an ancestor (a file there) came first: the store
            # wins, as when the listing shows it (``merge._yield_clashing_creates``). Reported as that
            # conflict (once per content), also by a final pass after which no sync follows.
            if (ctx.id, messages.PATH_CLASH, rel, sha) not in ctx.sync.logged_once:
                ctx.warn_once(messages.PATH_CLASH, rel, sha, blocker=blocker)
                ctx.recorder.bump(conflicts=1)
            return "settled", [SendSettled(rel=rel)]
        ctx.warn_once(messages.PATH_TAKEN, rel, sha, blocker=blocker)
        ctx.recorder.bump(conflicts=1)
        return "settled", [SendSettled(rel=rel)]
    if holder.content_sha256 == sha:
        return "saved", [uploaded(ctx, rel, holder)]  # the store already holds exactly these bytes
    if upload.base_sha is not None and holder.content_sha256 == upload.base_sha:
        retry = Upload(
            rel=rel,
            local_sha=sha,
            remote_id=holder.id,
            expected_sha=upload.base_sha,
            base_sha=upload.base_sha,
        )
        result, records = await upload_one(ctx, retry, content, sha)
        return ("settled" if result == "lost" else result), records
    return "settled", [lost(ctx, rel)]


async def upload_copy(ctx: StoreContext, copy: str, content: str) -> list[Record]:
    """Create the conflict copy ``copy`` of an edit that lost, with the edit's content (``keepLocalCopy`` in a
    push-only flush: no later pass will pull the winner and keep the copy)."""
    path = rel_to_remote(copy)
    try:
        memory = await ctx.api(lambda: ctx.client.create_memory(ctx.id, path, content))
    except store_errors.StoreError as exc:  # the copy is on disk: the next sync or flush sends it
        logger.warning(messages.UPLOAD_FAILED, extra=ctx.fields(copy, error=str(exc)))
        return []
    return [uploaded(ctx, copy, memory)]
