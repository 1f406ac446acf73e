"""Opening and scanning one store's folder: its identity (gone, replaced, or ours), the local scan, the
warnings about entries that never sync, and the count of files the store does not hold yet."""

from __future__ import annotations

from memsync.agent import messages
from memsync.agent.context import StoreContext
from memsync.agent.localfs import RootMissing, RootReplaced, StoreRoot, open_root, root_is_empty
from memsync.agent.merge import RootStatus
from memsync.agent.scan import HashCache, ScanResult, scan
from memsync.agent.state import StoreState, load_state


def open_and_scan(
    ctx: StoreContext, state: StoreState, cache: HashCache
) -> tuple[RootStatus, StoreRoot | None, ScanResult | None]:
    """The folder's status, and (when it is ours) the open folder and its scan. Blocking."""
    try:
        root = open_root(ctx.path, state.root_id)
    except RootMissing:
        return "missing", None, None
    except RootReplaced:
        if root_is_empty(ctx.path):
            return "replaced_empty", None, None
        return "replaced", None, None
    try:
        result = scan(root, ctx.id, cache)
    except BaseException:
        root.close()
        raise
    return "ok", root, result


def warn_blocked(ctx: StoreContext, result: ScanResult) -> None:
    """Once per entry: what the scan found that never syncs (symlinks, FIFOs..., names that cannot be memory
    paths) or could not read."""
    for rel, why in sorted(result.blocked.items()):
        if rel in result.unreadable:  # retried every pass; counted while it lasts
            ctx.warn_once(messages.UNREADABLE, rel, why, reason=result.unreadable[rel])
        elif rel in result.unsyncable:
            ctx.warn_once(messages.BAD_NAME, rel, why, reason=result.unsyncable[rel])
        else:
            ctx.warn_once(messages.NOT_REGULAR, rel, why, kind=why)


def unsaved_files(result: ScanResult, state: StoreState) -> list[str]:
    """Local files whose content the store does not hold per the baseline (refused content excepted), and
    files that cannot be read (they may hold an edit)."""
    changed = [
        rel
        for rel, sha in result.files.items()
        if state.baseline.get(rel) != sha and state.refused_shas.get(rel) != sha
    ]
    return sorted({*changed, *result.unreadable})


def count_unsaved(ctx: StoreContext, cache: HashCache) -> int:
    """How many local files are not saved in the store, by a fresh scan against the saved baseline.

    For a flush that failed or was cut off before it knew: never a guess. A store whose folder cannot be
    scanned counts as one unsaved file (something may be lost, and the number cannot be known). Blocking.
    """
    try:
        state = load_state(ctx.config.state_path, ctx.id) or StoreState(memory_store_id=ctx.id)
        _, root, result = open_and_scan(ctx, state, cache)
    except Exception:
        return 1
    if root is not None:
        root.close()
    if result is None:
        return 1
    return len(unsaved_files(result, state))
