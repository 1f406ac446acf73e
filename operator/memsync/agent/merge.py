"""The sync rules as pure decisions (docs/sync-semantics.md): plain data in, a plan out.

No I/O happens here. The engine gathers the inputs (a local scan, a content-free listing, the saved state),
asks these functions what to do, carries out the plan, and records what actually succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Literal

from memsync.agent import messages
from memsync.api.models import Deletions

Trust = Literal["sync", "recover", "leave"]
RootStatus = Literal["ok", "missing", "replaced", "replaced_empty"]


@dataclass(frozen=True)
class Remote:
    """One listed memory: its id and content hash."""

    id: str
    sha: str


@dataclass(frozen=True)
class Event:
    """A log line the plan asks for. ``once`` is a key: the engine logs an event with the same key only once
    per process (for conditions that would otherwise repeat every pass)."""

    level: int
    message: str
    rel: str | None = None
    once: tuple[str, ...] | None = None
    extra: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Pull:
    rel: str
    id: str
    sha: str
    local_sha: str | None  # what the scan saw locally; the engine re-checks it right before writing
    # the local file holds an edit that loses to this remote version (not part of the pull's identity)
    conflict: bool = field(default=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class Upload:
    rel: str
    local_sha: str
    remote_id: str | None  # None -> create
    expected_sha: str | None  # precondition of an update
    base_sha: str | None  # the baseline at decision time (used to settle a path conflict)


@dataclass(frozen=True, kw_only=True)
class RemoteDelete:
    rel: str
    id: str
    expected_sha: str


@dataclass(frozen=True, kw_only=True)
class LocalRemove:
    rel: str
    expected_sha: str


@dataclass(frozen=True, kw_only=True)
class Clash:
    """A new local file that cannot be created: the store holds a memory below its path (it is a folder
    there) or at one of its ancestors (a file there). ``at`` is the local path that clashes: the file itself,
    or its ancestor folder."""

    rel: str
    local_sha: str
    at: str


@dataclass(frozen=True)
class SyncInput:
    remote: Mapping[str, Remote]
    local: Mapping[str, str]
    baseline: Mapping[str, str]
    blocked: Set[str] = frozenset()
    blocked_files: Set[str] = frozenset()  # of those, unreadable regular files
    refused: Mapping[str, str] = field(default_factory=dict)
    pending: Mapping[str, float] = field(default_factory=dict)
    sent: Mapping[str, str] = field(default_factory=dict)
    prior: Mapping[str, str] = field(default_factory=dict)  # the baseline before a recovery cleared it
    read_only: bool = False
    deletions: Deletions = "enabled"
    now: float = 0.0
    final: bool = False
    delete_window: float = 30.0


@dataclass
class SyncPlan:
    baseline: dict[str, str]
    remote_ids: dict[str, str]
    refused: dict[str, str]
    pending: dict[str, float]
    sent: dict[str, str]
    prior: dict[str, str] = field(default_factory=dict)
    pulls: list[Pull] = field(default_factory=list)
    uploads: list[Upload] = field(default_factory=list)
    deletes: list[RemoteDelete] = field(default_factory=list)
    local_removals: list[LocalRemove] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # local edits that lost to a remote change
    events: list[Event] = field(default_factory=list)
    waiting_deletes: int = 0
    held_deletes: int = 0
    held: list[str] = field(default_factory=list)  # confirmed local deletions held back by the cap
    # New local files that cannot be created yet: the store still holds a memory of ours at an ancestor or
    # below their path (a file replaced by a folder of the same name, or the reverse) whose deletion has not
    # gone out. rel -> the path that is in the way. They go once it is deleted.
    deferred: dict[str, str] = field(default_factory=dict)
    suppressed_deletes: int = 0
    log_only_deletes: list[str] = field(default_factory=list)
    # New local files that lose to a memory the store holds at a clashing path (see ``Clash``).
    clashes: list[Clash] = field(default_factory=list)

    @property
    def is_noop(self) -> bool:
        return not (self.pulls or self.uploads or self.deletes or self.local_removals or self.clashes)


def delete_cap(baseline_size: int) -> int:
    """Per-pass delete cap (docs/sync-semantics.md#deletes): max(8, min(50, floor(len(baseline)/4)))."""
    return max(8, min(50, baseline_size // 4))


def trust(root: RootStatus, marker_ok: bool, entries: int, baseline_size: int) -> Trust:
    """Step 1 and 3: whether the folder can be synced, must be recovered, or must be left as found.

    - the folder is gone (or replaced by another, empty directory) -> recover;
    - the folder was replaced by a symlink or by a non-empty directory -> leave as found;
    - marker bad and files present -> leave as found; marker bad and no files -> recover;
    - marker intact, no files, and the baseline had more than one entry (a wipe) -> recover;
    - otherwise -> sync (a single missing file with the marker intact is an ordinary deletion).
    """
    if root in ("missing", "replaced_empty"):
        return "recover"
    if root == "replaced":
        return "leave"
    if not marker_ok:
        return "leave" if entries > 0 else "recover"
    if entries == 0 and baseline_size > 1:
        return "recover"
    return "sync"


def _under_blocked(rel: str, blocked: Set[str], files: Set[str] = frozenset()) -> bool:
    """At or below a blocked entry; below a blocked regular file (``files``) nothing can be, so a path there
    is simply absent locally."""
    if rel in blocked:
        return True
    parts = rel.split("/")
    return any((a := "/".join(parts[:i])) in blocked and a not in files for i in range(1, len(parts)))


def plan_sync(inp: SyncInput) -> SyncPlan:
    """Steps 2, 4 and 5 of the periodic sync for one store whose folder passed the trust check."""
    baseline = dict(inp.baseline)
    # Step 2: settle unknown-outcome sends. A remote memory holding exactly the bytes we sent is our own
    # upload whose response was lost: it enters the baseline. Every sent entry is then cleared.
    for rel, sha in inp.sent.items():
        listed = inp.remote.get(rel)
        if listed is not None and listed.sha == sha:
            baseline[rel] = sha
    plan = SyncPlan(
        baseline=baseline,
        remote_ids={rel: r.id for rel, r in inp.remote.items()},
        refused=dict(inp.refused),
        pending=dict(inp.pending),
        sent={},
    )
    candidates: list[str] = []
    paths = set(inp.remote) | set(inp.local) | set(baseline)
    for rel in sorted(paths):
        if _under_blocked(rel, inp.blocked, inp.blocked_files):
            # A symlink, FIFO... (or something below one) sits here: never pull over it, never push it,
            # never take it for a deletion. The scan's caller warns about it.
            plan.pending.pop(rel, None)
            continue
        _merge_path(inp, plan, rel, candidates)
    _corroborated_deletes(inp, plan, candidates)
    _defer_blocked_creates(inp, plan, candidates)
    _yield_clashing_creates(inp, plan)
    # A prior entry lasts until its path is back in the baseline, or the store no longer holds those bytes.
    plan.prior = {
        rel: sha
        for rel, sha in inp.prior.items()
        if rel not in plan.baseline and (listed := inp.remote.get(rel)) is not None and listed.sha == sha
    }
    return plan


def _merge_path(inp: SyncInput, plan: SyncPlan, rel: str, candidates: list[str]) -> None:
    remote = inp.remote.get(rel)
    local = inp.local.get(rel)
    base = plan.baseline.get(rel)
    if local is not None:
        plan.pending.pop(rel, None)
    refused = plan.refused.get(rel)
    if refused is not None and refused != local:
        del plan.refused[rel]  # the file changed (or went away): it may be tried again
        refused = None

    if remote is None:
        _merge_not_in_store(inp, plan, rel, local=local, base=base, refused=refused)
        return

    if base is None and local is not None and local != remote.sha and inp.prior.get(rel) == remote.sha:
        # Written after a wipe whose recovery did not finish, while the store kept what we last agreed on:
        # a local edit (only the local side changed), not a conflict for the store to win.
        _push_local_edit(inp, plan, rel, local, remote, refused=refused)
        return
    remote_changed = remote.sha != base
    locally_edited = local is not None and local not in (base, remote.sha)

    if local is None and base is not None:
        if not remote_changed:
            if not inp.read_only:
                candidates.append(rel)
            return
        plan.events.append(Event(logging.WARNING, messages.RESTORING, rel))
        plan.pulls.append(Pull(rel=rel, id=remote.id, sha=remote.sha, local_sha=None))
        return
    if remote_changed:
        if local == remote.sha:
            plan.baseline[rel] = remote.sha  # both sides already agree: adopt without fetching
            plan.adopted.append(rel)
            return
        if locally_edited:
            plan.events.append(Event(logging.WARNING, messages.BOTH_CHANGED, rel))
            plan.conflicts.append(rel)
        plan.pulls.append(
            Pull(rel=rel, id=remote.id, sha=remote.sha, local_sha=local, conflict=locally_edited)
        )
        return
    if local is not None and local != base:
        _push_local_edit(inp, plan, rel, local, remote, refused=refused)
        return
    plan.baseline[rel] = remote.sha


def _merge_not_in_store(
    inp: SyncInput, plan: SyncPlan, rel: str, *, local: str | None, base: str | None, refused: str | None
) -> None:
    """A path the store does not list: forget it, remove the local copy, or upload it (again)."""
    plan.pending.pop(rel, None)
    if local is None:
        plan.baseline.pop(rel, None)
        return
    if base is not None and local == base:
        # Deleted remotely, unchanged locally: remove it (the engine re-hashes first).
        plan.local_removals.append(LocalRemove(rel=rel, expected_sha=base))
        return
    # An un-pushed local edit (or a new file) whose memory is not in the store.
    if _held_back(inp, plan, rel, local, refused):
        return
    if base is not None:
        plan.events.append(Event(logging.WARNING, messages.RECREATING, rel))
    plan.uploads.append(Upload(rel=rel, local_sha=local, remote_id=None, expected_sha=None, base_sha=base))


def _push_local_edit(
    inp: SyncInput, plan: SyncPlan, rel: str, local: str, remote: Remote, *, refused: str | None
) -> None:
    """Only the local side changed: upload, conditional on the listed sha (never from a read-only store)."""
    if not _held_back(inp, plan, rel, local, refused):
        plan.uploads.append(
            Upload(
                rel=rel, local_sha=local, remote_id=remote.id, expected_sha=remote.sha, base_sha=remote.sha
            )
        )


def _held_back(inp: SyncInput, plan: SyncPlan, rel: str, local: str, refused: str | None) -> bool:
    """Whether a local change must not be pushed: a read-only store (warned once per content), or content the
    server refused for good."""
    if inp.read_only:
        plan.events.append(
            Event(logging.WARNING, messages.READ_ONLY_LOCAL_EDIT, rel, once=("read_only", rel, local))
        )
        return True
    return refused == local


def _corroborated_deletes(inp: SyncInput, plan: SyncPlan, candidates: list[str]) -> None:
    """Step 5: a local deletion goes out only once confirmed, after the window, within the cap."""
    candidate_set = set(candidates)
    for rel in [r for r in plan.pending if r not in candidate_set]:
        del plan.pending[rel]
    if not candidates:
        return
    if inp.deletions == "disabled":
        plan.suppressed_deletes = len(candidates)
        plan.events.append(
            Event(
                logging.DEBUG,
                f"{messages.DELETES_DISABLED}; {len(candidates)} local deletion(s) not propagated",
                extra={"suppressed": len(candidates)},
            )
        )
        plan.pending.clear()
        return
    confirmed: list[str] = []
    for rel in candidates:
        first = plan.pending.get(rel)
        if first is None or first > inp.now:  # first seen now (or the wall clock went backwards)
            first = inp.now
            plan.pending[rel] = first
        if not inp.final and inp.now - first < inp.delete_window:
            plan.waiting_deletes += 1
            continue
        confirmed.append(rel)
    cap = delete_cap(len(inp.baseline))
    send, held = confirmed[:cap], confirmed[cap:]
    plan.held_deletes = len(held)
    plan.held = held
    if held:
        verb = "would send" if inp.deletions == "log_only" else "sent"
        plan.events.append(
            Event(
                logging.WARNING,
                f"{messages.DELETE_CAP}: {verb} {len(send)} deletes, held {len(held)} for later syncs",
                extra={"cap": cap},
            )
        )
    for rel in send:
        if inp.deletions == "log_only":
            plan.log_only_deletes.append(rel)
            plan.events.append(Event(logging.WARNING, messages.LOG_ONLY_DELETE, rel))
        else:
            plan.deletes.append(RemoteDelete(rel=rel, id=inp.remote[rel].id, expected_sha=plan.baseline[rel]))


def _ancestors(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _defer_blocked_creates(inp: SyncInput, plan: SyncPlan, candidates: list[str]) -> None:
    """A create whose path collides with one of our own memories that is being deleted locally waits.

    When a synced file is replaced by a folder of the same name (or a synced folder by a file), the store
    refuses the new path until the old memory is gone. The old memory is an ordinary local deletion (window,
    cap and mode apply); the creates go out in the same pass as its delete (deletes are sent first), or in a
    later one. Never a conflict: both sides are this session's own doing.
    """
    going = {d.rel for d in plan.deletes}
    gone_locally = set(candidates)
    if not gone_locally:
        return
    by_dir: dict[str, list[str]] = {}
    for rel in gone_locally:
        for ancestor in _ancestors(rel):
            by_dir.setdefault(ancestor, []).append(rel)
    keep: list[Upload] = []
    for upload in plan.uploads:
        if upload.remote_id is not None:
            keep.append(upload)
            continue
        blockers = [a for a in _ancestors(upload.rel) if a in gone_locally] + by_dir.get(upload.rel, [])
        waiting = sorted(b for b in blockers if b not in going)
        if waiting:
            plan.deferred[upload.rel] = waiting[0]
        else:
            keep.append(upload)
    plan.uploads = keep


def _yield_clashing_creates(inp: SyncInput, plan: SyncPlan) -> None:
    """A create that clashes with a memory being pulled loses, as any local edit loses to a remote change.

    A local file where the store holds memories below its path (a folder there), or a local file inside a
    folder whose path the store holds as a memory (a file there): both cannot be in the store, and the store
    refuses the create for as long as its memory lives. The store wins: the local file is dropped (kept as a
    conflict copy under ``keepLocalCopy``) before the pulls, which then write the store's version. A create
    deferred behind this session's own deletes loses too when such a pull is in its way.
    """
    pulled = {p.rel for p in plan.pulls}
    if not pulled:
        return
    folders = {a for rel in pulled for a in _ancestors(rel)}

    def clash_at(rel: str) -> str | None:
        return rel if rel in folders else next((a for a in _ancestors(rel) if a in pulled), None)

    def lose(rel: str, sha: str, at: str) -> None:
        plan.clashes.append(Clash(rel=rel, local_sha=sha, at=at))
        plan.conflicts.append(rel)
        plan.events.append(Event(logging.WARNING, messages.PATH_CLASH, rel))

    keep: list[Upload] = []
    for upload in plan.uploads:
        at = clash_at(upload.rel)
        if upload.remote_id is not None or at is None:
            keep.append(upload)
        else:
            lose(upload.rel, upload.local_sha, at)
    plan.uploads = keep
    for rel in sorted(plan.deferred):
        at = clash_at(rel)
        if at is not None and rel in inp.local:
            del plan.deferred[rel]
            lose(rel, inp.local[rel], at)


def plan_flush(
    *,
    local: Mapping[str, str],
    baseline: Mapping[str, str],
    refused: Mapping[str, str],
    remote_ids: Mapping[str, str],
    read_only: bool,
    prior: Mapping[str, str] | None = None,
) -> list[Upload]:
    """The push-only flush (docs/sync-semantics.md#sync-flush-and-the-final-shutdown): upload every file whose
    content differs from the baseline.

    No listing: an update is conditional on the *baseline* sha, so a remote that changed since is left alone
    (409), and a remote that already holds these bytes answers 200 without a new version (it is adopted).
    Read-only stores and refused content are skipped; nothing is deleted or pulled. A create refused because
    the path is taken is settled against the baseline (or, after an unfinished recovery, the ``prior`` one):
    a store still holding those bytes gets the edit as a conditional update.
    """
    if read_only:
        return []
    prior = prior or {}
    blocked = flush_blocked(local, baseline)
    uploads = []
    for rel in sorted(local):
        sha = local[rel]
        base = baseline.get(rel)
        if sha == base or refused.get(rel) == sha or rel in blocked:
            continue
        remote_id = remote_ids.get(rel) if base is not None else None
        known = base if base is not None else prior.get(rel)
        uploads.append(
            Upload(
                rel=rel,
                local_sha=sha,
                remote_id=remote_id,
                expected_sha=base if remote_id else None,
                base_sha=known,
            )
        )
    return uploads


def flush_blocked(local: Mapping[str, str], baseline: Mapping[str, str]) -> dict[str, str]:
    """New local files a push-only flush cannot create: one of our memories (a file now gone locally) sits at
    an ancestor or below their path. rel -> that path. Only a sync deletes it; until then they are unsent."""
    gone = [rel for rel in baseline if rel not in local]
    if not gone:
        return {}
    under: dict[str, str] = {}
    for rel in gone:
        for ancestor in _ancestors(rel):
            under.setdefault(ancestor, rel)
    out: dict[str, str] = {}
    for rel in local:
        if rel in baseline:
            continue
        blocker = next((a for a in _ancestors(rel) if a in baseline and a not in local), None) or under.get(
            rel
        )
        if blocker is not None:
            out[rel] = blocker
    return out
