"""``conflictPolicy: keepLocalCopy``: the losing local content of a conflict, kept beside its file.

The store still wins (docs/sync-semantics.md#conflicts); before its version overwrites the file, the local
bytes are written atomically (never through a symlink: the store folder's safe layer) as
``<name>.conflict-<session>-<UTC time><ext>``, which then syncs like any new file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from memsync.agent.localfs import StoreRoot
from memsync.agent.relpath import path_problem
from memsync.api.hashing import sha256_bytes

MAX_ATTEMPTS = 100


def _copy_parts(rel: str, session: str) -> tuple[str, str, str]:
    """(directory, ``<stem>.conflict-<session>-``, ``<ext>`` with its dot) of ``rel``'s conflict copies."""
    head, _, name = rel.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    if not stem:  # no extension (or a dot file such as ".env")
        stem, dot, ext = name, "", ""
    return head, f"{stem}.conflict-{session}-", dot + ext


def conflict_copy_name(rel: str, session: str, when: str, attempt: int = 1) -> str:
    """``dir/name.conflict-<session>-<when><ext>`` beside ``rel`` (``-<attempt>`` after the time, from 2)."""
    head, prefix, ext = _copy_parts(rel, session)
    suffix = f"-{attempt}" if attempt > 1 else ""
    copy = f"{prefix}{when}{suffix}{ext}"
    return f"{head}/{copy}" if head else copy


@dataclass(frozen=True)
class CopyResult:
    copy: str | None  # the copy's path (new, or one already holding these bytes)
    created: bool = False
    changed: bool = False  # the file no longer holds the losing content: nothing to keep
    refused: str | None = None  # the copy's name cannot be a memory path: why


def keep_local_copy(root: StoreRoot, rel: str, local_sha: str | None, session: str, now: float) -> CopyResult:
    """Write the local content of ``rel`` beside it, unless a copy of these very bytes is already there (an
    earlier flush made it): one conflict, one copy."""
    data = root.read_bytes(rel)
    if sha256_bytes(data) != local_sha:
        return CopyResult(None, changed=True)
    for existing in root.siblings(rel, _copy_parts(rel, session)[1]):
        if root.sha_of(existing) == local_sha:
            return CopyResult(existing)
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    for attempt in range(1, MAX_ATTEMPTS):
        copy = conflict_copy_name(rel, session, when, attempt)
        problem = path_problem(copy)
        if problem is not None:
            return CopyResult(copy, refused=problem)
        if not root.exists(copy) and root.replace_if(copy, data, None):
            return CopyResult(copy, created=True)
    return CopyResult(None, refused="every conflict copy name is taken")


def keep_clash_copy(
    root: StoreRoot, rel: str, *, at: str, local_sha: str, session: str, when: str
) -> CopyResult:
    """Before a clashing local file is dropped (``merge.Clash``): its bytes kept out of the way, at ``rel``
    with the clashing part ``at`` (the file itself, or its ancestor folder) renamed as its conflict copy."""
    data = root.read_bytes(rel)
    if sha256_bytes(data) != local_sha:
        return CopyResult(None, changed=True)
    rest = rel[len(at) :]
    for attempt in range(1, MAX_ATTEMPTS):
        copy = conflict_copy_name(at, session, when, attempt) + rest
        problem = path_problem(copy)
        if problem is not None:
            return CopyResult(copy, refused=problem)
        if not root.exists(copy) and root.replace_if(copy, data, None):
            return CopyResult(copy, created=True)
        if root.sha_of(copy) == local_sha:
            return CopyResult(copy)
    return CopyResult(None, refused="every conflict copy name is taken")
