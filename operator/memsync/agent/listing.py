"""Reading the store's tree: paged listings, the fan-out over path prefixes, full-view fetches, and the
mapping of store paths to local relative paths (docs/sync-semantics.md#detecting-changes).

A listing fans out over path prefixes (a ``depth=1`` listing shows a level's prefixes, which are then listed
concurrently) when the store is large enough for it to pay. Nothing here changes the sync state: a listing
returns the memories, and the paths that can never be local files as a ``Listed`` record.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping

from memsync.agent import messages
from memsync.agent.context import StoreContext
from memsync.agent.records import Listed
from memsync.agent.relpath import UnsafePath, remote_to_rel
from memsync.api.constants import LIST_LIMIT_FULL_MAX, LIST_LIMIT_MAX, MARKER_FILENAME
from memsync.api.models import Memory, MemoryPrefix, View
from memsync.client import errors as store_errors
from memsync.client.core import PageCursors

FANOUT_MIN = 100  # list a level's prefixes concurrently when the baseline holds more than this below it


async def list_level(
    ctx: StoreContext, *, view: View, prefix: str | None, depth: int
) -> list[Memory | MemoryPrefix]:
    """Every page of one listing."""
    limit = LIST_LIMIT_FULL_MAX if view == "full" else LIST_LIMIT_MAX
    items: list[Memory | MemoryPrefix] = []
    cursors = PageCursors()
    page: str | None = None
    while True:
        result = await ctx.api(
            functools.partial(
                ctx.client.list_memories_page,
                ctx.id,
                view=view,
                limit=limit,
                page=page,
                path_prefix=prefix,
                depth=depth,
            )
        )
        ctx.recorder.listed()
        items.extend(result.data)
        page = cursors.follow(result.next_page)  # a cursor handed out again fails the listing
        if page is None:
            return items


async def list_tree(
    ctx: StoreContext, prefix: str | None, view: View, counts: Mapping[str, int] | None
) -> list[Memory]:
    """Every memory under ``prefix`` (None = the whole store).

    With ``counts`` (baseline entries per directory prefix) a level holding more than FANOUT_MIN entries is
    split: a ``depth=1`` listing shows its memories and sub-prefixes, which are listed concurrently. Without
    counts (the mount) only the root is split.
    """
    key = prefix or "/"
    split = counts.get(key, 0) > FANOUT_MIN if counts is not None else prefix is None
    if not split:
        items = await list_level(ctx, view=view, prefix=prefix, depth=0)
        return [i for i in items if isinstance(i, Memory)]
    items = await list_level(ctx, view="basic", prefix=prefix, depth=1)
    memories = [i for i in items if isinstance(i, Memory)]
    prefixes = [i.path for i in items if isinstance(i, MemoryPrefix)]
    subtrees = await asyncio.gather(*(list_tree(ctx, p, view, counts) for p in prefixes))
    if view == "full" and memories:
        memories = await fetch_many(ctx, memories)
    for subtree in subtrees:
        memories.extend(subtree)
    return memories


async def fetch_many(ctx: StoreContext, memories: list[Memory]) -> list[Memory]:
    """The full view of each memory (those deleted meanwhile are left out)."""

    async def one(m: Memory) -> Memory | None:
        async with ctx.fetch_sem:
            try:
                full = await ctx.api(lambda: ctx.client.get_memory(ctx.id, m.id, view="full"))
            except store_errors.NotFound:
                return None
            ctx.recorder.fetched()
            return full

    return [m for m in await asyncio.gather(*(one(m) for m in memories)) if m is not None]


def prefix_counts(baseline: Iterable[str]) -> dict[str, int]:
    """Baseline entries per directory prefix (``/`` holds them all)."""
    counts: dict[str, int] = {"/": 0}
    for rel in baseline:
        counts["/"] += 1
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            key = "/" + "/".join(parts[:i]) + "/"
            counts[key] = counts.get(key, 0) + 1
    return counts


async def list_for_sync(ctx: StoreContext, baseline: Mapping[str, str]) -> list[Memory]:
    """The content-free listing of a periodic pass: one listing, or the fan-out for a large baseline.

    Conditional listing (a memsync store server extension, docs/store-api.md): a one-item probe carrying the
    ETag of the last full listing answers 304 when no memory of the store changed since, and that listing is
    reused, so a no-change pass is one request. The ETag is the probe's, taken before the full listing and
    kept only once that listing succeeded: a change made during the listing makes the next probe miss, it
    can never hide. A server that sends no ETag (the hosted API) is listed in full, and not probed again.
    """
    cache = ctx.listing
    etag: str | None = None
    if cache.supported is not False:
        probe = await ctx.api(lambda: ctx.client.probe_memories(ctx.id, if_none_match=cache.etag))
        ctx.recorder.listed()
        if probe.not_modified and cache.etag is not None:
            return list(cache.memories)
        cache.supported = probe.etag is not None
        etag = probe.etag
    if len(baseline) > FANOUT_MIN:
        memories = await list_tree(ctx, None, "basic", prefix_counts(baseline))
    else:
        memories = [
            i for i in await list_level(ctx, view="basic", prefix=None, depth=0) if isinstance(i, Memory)
        ]
    if etag is not None:
        cache.etag, cache.memories = etag, tuple(memories)
    return memories


def map_remote(ctx: StoreContext, memories: Iterable[Memory]) -> tuple[dict[str, Memory], Listed]:
    """rel -> memory for every listed memory that can be a local file, and the others (the marker's path, a
    segment over 255 bytes, a backslash...) as a ``Listed`` record: refused until a listing no longer shows
    them. Each is warned about once, with its path."""
    mapped: dict[str, Memory] = {}
    unmappable: dict[str, str] = {}
    for memory in memories:
        if memory.path == "/" + MARKER_FILENAME:
            unmappable[memory.path] = "is the store's marker file, which never syncs"
            ctx.warn_once(
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
            ctx.warn_once(
                messages.UNSAFE_REMOTE_PATH, None, memory.path, remote_path=memory.path, reason=str(exc)
            )
            continue
        mapped[rel] = memory
    return mapped, Listed(unmappable=unmappable)
