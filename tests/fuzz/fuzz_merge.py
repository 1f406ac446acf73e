"""The three-way merge (agent/merge.py ``plan_sync`` and ``plan_flush``): for any baseline, local and remote
state, the plan never loses a version, as docs/sync-semantics.md states the rules.

For any store state (paths that nest as files and folders, any hashes, blocked and refused paths, pending
deletions, unknown-outcome sends, a prior baseline, read-only or not, any deletions mode, time and window,
final or not), ``plan_sync``:
- leaves blocked paths alone (nothing pulled, pushed, deleted or removed at or below one);
- loses no local version: a file that differs from both the baseline and the store is uploaded, or reported
  as a conflict (pulled over or yielding to a clash), or held back (read-only store, content refused, a create
  deferred behind this session's own delete); a pull over a file the scan saw edited is marked a conflict;
  a file is removed only when the store no longer lists it and the file is the baseline's version;
- loses no store version: a version the baseline does not hold is pulled (or is what the file holds already),
  except where a recovery's prior baseline shows only the file changed; a delete is sent only for a store
  version equal to the baseline, with that hash as its precondition, for a file gone locally, in a writable
  store with deletions enabled, after the window (unless final) and within the cap; an update is conditional
  on the listed hash, and a create goes only to a path the store does not list;
- gives each path at most one action, and the same plan for the same input.
``plan_flush`` uploads every local file whose content differs from the baseline exactly once (unless the
store is read-only, the content was refused, or one of the session's own memories is in its way), never
anything else, an update conditional on the baseline's hash.
"""

from __future__ import annotations

from typing import TypeVar

from harness import Provider, holds, pick, provider

from memsync.agent import messages
from memsync.agent.merge import Remote, SyncInput, SyncPlan, delete_cap, flush_blocked, plan_flush, plan_sync

T = TypeVar("T")
PATHS = ("a", "b", "d", "d/x", "d/y", "e/f/g", "e/f", "e", "e/h", "z")
SHAS = tuple(c * 64 for c in "0123")


def tree(entries: dict[str, T]) -> dict[str, T]:
    """The entries a folder (or a store) can hold at once: none of them inside another's path."""
    return {p: v for p, v in entries.items() if not any(p.startswith(q + "/") for q in entries)}


def some(fdp: Provider) -> dict[str, str]:
    return tree({p: pick(fdp, SHAS) for p in PATHS if fdp.ConsumeBool()})


def state(fdp: Provider) -> SyncInput:
    remote = tree(
        {
            p: Remote(f"mem_{p}_{fdp.ConsumeIntInRange(0, 1)}", pick(fdp, SHAS))
            for p in PATHS
            if fdp.ConsumeBool()
        }
    )
    baseline = some(fdp)
    blocked = {p for p in PATHS if fdp.ConsumeIntInRange(0, 7) == 0}
    return SyncInput(
        remote=remote,
        local=some(fdp),
        baseline=baseline,
        blocked=frozenset(blocked),
        blocked_files=frozenset(p for p in blocked if fdp.ConsumeBool()),
        refused=some(fdp) if fdp.ConsumeBool() else {},
        pending={p: float(fdp.ConsumeIntInRange(0, 100)) for p in baseline if fdp.ConsumeBool()},
        sent=some(fdp) if fdp.ConsumeBool() else {},
        prior=some(fdp) if fdp.ConsumeBool() else {},
        read_only=fdp.ConsumeIntInRange(0, 3) == 0,
        deletions=pick(fdp, ("enabled", "enabled", "log_only", "disabled")),
        now=float(fdp.ConsumeIntInRange(0, 100)),
        final=fdp.ConsumeBool(),
        delete_window=float(pick(fdp, (0, 30, 60))),
    )


def under_blocked(inp: SyncInput, rel: str) -> bool:
    parts = rel.split("/")
    ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
    return rel in inp.blocked or any(a in inp.blocked and a not in inp.blocked_files for a in ancestors)


def settled_baseline(inp: SyncInput) -> dict[str, str]:
    """The baseline once the sends of unknown outcome the store shows are taken as done (step 2)."""
    base = dict(inp.baseline)
    for rel, sha in inp.sent.items():
        if rel in inp.remote and inp.remote[rel].sha == sha:
            base[rel] = sha
    return base


def acted(plan: SyncPlan) -> list[str]:
    return [
        *(p.rel for p in plan.pulls),
        *(u.rel for u in plan.uploads),
        *(d.rel for d in plan.deletes),
        *(r.rel for r in plan.local_removals),
        *(c.rel for c in plan.clashes),
    ]


def check_local_versions(inp: SyncInput, plan: SyncPlan, base: dict[str, str], rel: str) -> None:
    local, remote = inp.local.get(rel), inp.remote.get(rel)
    if local is None or local == base.get(rel) or (remote is not None and local == remote.sha):
        return
    uploaded = any(u.rel == rel and u.local_sha == local for u in plan.uploads)
    read_only = any(e.rel == rel and e.message == messages.READ_ONLY_LOCAL_EDIT for e in plan.events)
    kept = (
        uploaded
        or rel in plan.conflicts
        or read_only
        or inp.refused.get(rel) == local
        or rel in plan.deferred
    )
    holds(kept, f"{inp}: the local version of {rel!r} is lost: {plan}")


def check_store_versions(inp: SyncInput, plan: SyncPlan, base: dict[str, str], rel: str) -> None:
    remote, local = inp.remote.get(rel), inp.local.get(rel)
    if remote is None or remote.sha == base.get(rel) or remote.sha == local:
        return
    only_local_changed = rel not in base and local is not None and inp.prior.get(rel) == remote.sha
    pulled = any(p.rel == rel and (p.id, p.sha) == (remote.id, remote.sha) for p in plan.pulls)
    holds(pulled or only_local_changed, f"{inp}: the store's version of {rel!r} is not pulled: {plan}")


def check_actions(inp: SyncInput, plan: SyncPlan, base: dict[str, str]) -> None:
    for pull in plan.pulls:
        edited = pull.local_sha not in (None, base.get(pull.rel), pull.sha)
        holds(not edited or (pull.conflict and pull.rel in plan.conflicts), f"{inp}: {pull} clobbers an edit")
    for removal in plan.local_removals:
        holds(removal.rel not in inp.remote, f"{inp}: {removal} of a memory the store lists")
        holds(
            inp.local.get(removal.rel) == base.get(removal.rel) == removal.expected_sha, f"{inp}: {removal}"
        )
    for upload in plan.uploads:
        holds(not inp.read_only and inp.local.get(upload.rel) == upload.local_sha, f"{inp}: {upload}")
        listed = inp.remote.get(upload.rel)
        if upload.remote_id is None:
            holds(listed is None, f"{inp}: {upload} creates over a memory the store lists")
        else:
            holds(
                listed is not None and (upload.remote_id, upload.expected_sha) == (listed.id, listed.sha),
                f"{upload}",
            )
    for delete in plan.deletes:
        listed, first = inp.remote.get(delete.rel), inp.pending.get(delete.rel)
        holds(
            listed is not None and listed.sha == base.get(delete.rel) == delete.expected_sha,
            f"{inp}: {delete}",
        )
        holds(
            delete.rel not in inp.local and not inp.read_only and inp.deletions == "enabled",
            f"{inp}: {delete}",
        )
        if first is None or first > inp.now:  # first seen now (or the clock went back): the window starts now
            first = inp.now
        waited = inp.final or inp.now - first >= inp.delete_window
        holds(waited, f"{inp}: {delete} before its window")
    holds(
        len(plan.deletes) <= delete_cap(len(inp.baseline)), f"{inp}: {len(plan.deletes)} deletes over the cap"
    )
    rels = acted(plan)
    holds(len(rels) == len(set(rels)), f"{inp}: a path with two actions: {plan}")
    holds(not any(under_blocked(inp, r) for r in rels), f"{inp}: an action on a blocked path: {plan}")


def check_flush(inp: SyncInput) -> None:
    base = dict(inp.baseline)
    ids = {rel: r.id for rel, r in inp.remote.items()}
    uploads = plan_flush(
        local=inp.local,
        baseline=base,
        refused=inp.refused,
        remote_ids=ids,
        read_only=inp.read_only,
        prior=inp.prior,
    )
    if inp.read_only:
        holds(uploads == [], f"{inp}: a flush uploads to a read-only store")
        return
    blocked = flush_blocked(inp.local, base)
    expected = sorted(
        rel
        for rel, sha in inp.local.items()
        if sha != base.get(rel) and inp.refused.get(rel) != sha and rel not in blocked
    )
    holds(sorted(u.rel for u in uploads) == expected, f"{inp}: the flush sends {uploads}, not {expected}")
    for upload in uploads:
        holds(upload.local_sha == inp.local[upload.rel], f"{inp}: {upload}")
        holds(upload.remote_id is None or upload.expected_sha == base.get(upload.rel), f"{inp}: {upload}")


def test_one_input(data: bytes) -> None:
    inp = state(provider(data))
    plan = plan_sync(inp)
    holds(plan == plan_sync(inp), f"{inp}: two plans for one input")
    base = settled_baseline(inp)
    for rel in set(inp.local) | set(inp.remote) | set(base):
        if not under_blocked(inp, rel):
            check_local_versions(inp, plan, base, rel)
            check_store_versions(inp, plan, base, rel)
    check_actions(inp, plan, base)
    check_flush(inp)
