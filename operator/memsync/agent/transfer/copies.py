"""The local files that lose a conflict or a path clash: their copies under ``keepLocalCopy``, and the
removal of a local file in the way of the store's version (docs/sync-semantics.md#conflicts). Blocking: run
in a worker thread."""

from __future__ import annotations

import logging
import time

from memsync.agent import messages
from memsync.agent.conflicts import keep_clash_copy, keep_local_copy
from memsync.agent.context import StoreContext
from memsync.agent.localfs import StoreRoot
from memsync.agent.merge import Clash
from memsync.agent.relpath import rel_to_remote

logger = logging.getLogger("memsync.agent")

CHANGED_SINCE_SCAN = "the local file changed since the scan; the next sync decides"


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
