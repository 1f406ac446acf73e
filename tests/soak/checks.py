"""The soak's verdict as pure functions over plain data: what the test did, what the store and the folders
hold at the end, what the agents reported, and what went over the wire. Each returns the violations it finds.

- every local edit is in the store (some version has its content), or the agent reported a conflict for
  that path after the edit; a file still unreadable at the end is reported by name instead;
- every local delete reached the store, or the session's end reported it held back by the delete cap (the
  count covers it and every path named is such a delete), or another writer changed that path after it, or
  after the file became unreadable (the agent cannot know that memory is the file's), or after the test last
  wrote the file when the store holds other content than the file did (both wrote the path: a conflict the
  store wins; also when the agent reported the file's content lost to the store's after it was written), or
  the test created the file and deleted it before any of it reached the store (the memory there, holding
  other content, is another writer's), or the file held the store's memory as pulled and the sidecar was
  SIGKILLed between that memory's last version and the delete (the pull may not have reached the saved
  state, and the agent keeps a memory it cannot tell is its own), or the file held a version of the memory
  that another writer has since replaced (the newer version wins over the delete), or the agent reported
  that the delete lost;
- no write overwrote a memory without a precondition: every agent update and delete carried one, and in the
  version history every session version that follows another version of its memory follows one whose hash
  that session sent as the precondition;
- no memory is duplicated (one unique content live at two paths, unless the test last wrote it at each of
  them: both sessions renamed the same file) or stray (live at a path no attached folder holds, unless a
  session's end named it as refused: it cannot be written locally);
- every sidecar ended with a complete flush and nothing unsent, except files left unreadable at the end and
  new files waiting behind a delete the cap held at the end (named by the agent's warning): those are exactly
  the unsent ones, the unreadable ones counted and named in the termination report.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from memsync.agent import messages
from memsync.api.hashing import content_sha256
from memsync.contracts.report import SAMPLE_MAX

WRITE_LOST = (messages.BOTH_CHANGED, messages.UPLOAD_LOST, messages.RECREATING, messages.PATH_CLASH)
# The store's version kept at the path after the delete: the delete lost, reported as a conflict.
DELETE_LOST = (messages.RESTORING, messages.DELETE_LOST, messages.BOTH_CHANGED, messages.UPLOAD_LOST)
CONFLICTS = (
    messages.BOTH_CHANGED,
    messages.UPLOAD_LOST,
    messages.RESTORING,
    messages.DELETE_LOST,
    messages.PATH_CLASH,
)
_MEMORY_URL = re.compile(r"^/v1/memory_stores/[^/]+/memories/[^/?]+$")

Folder = tuple[str, str]  # (pod, store id)


@dataclass(frozen=True)
class LocalOp:
    """The last thing the test did to one path of one folder."""

    kind: str  # "write" or "delete"
    sha256: str | None  # of the content written (or deleted; None when it could not be read)
    at: float  # unix time
    op: int
    source: str = ""  # the operation kind that did it (create, edit, rename, swap, ...)
    # a delete of a file that was unreadable since this time: the agent last saw the path then
    blind_since: float | None = None
    # a delete of a file the test last wrote at this time (None: the agent wrote it, or the seed)
    written_at: float | None = None
    # the test created this file where nothing was, at this time, and only the test wrote it since (a write:
    # this file; a delete: the file deleted); None when the file was the agent's or the seed's first, or the
    # agent wrote it since
    created_at: float | None = None


@dataclass(frozen=True)
class Version:
    path: str  # relative, no leading '/'
    sha256: str | None
    at: float
    actor: str  # session id or api key id
    memory_id: str = ""
    operation: str = "created"


@dataclass(frozen=True)
class Report:
    """One WARNING of an agent about one path."""

    store_id: str
    path: str  # relative
    message: str
    at: float


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


def sent_precondition(method: str, target: str, body: bytes) -> tuple[str, str | None] | None:
    """For an agent request that overwrites or deletes a memory: (memory id, the precondition hash it carried,
    or None when it carried none). None for any other request."""
    url = urlsplit(target)
    if not _MEMORY_URL.match(url.path) or method not in ("POST", "DELETE"):
        return None
    memory_id = url.path.rsplit("/", 1)[1]
    if method == "DELETE":
        return memory_id, (parse_qs(url.query).get("expected_content_sha256") or [None])[0]
    try:
        data: Any = json.loads(body or b"{}")
    except ValueError:
        return memory_id, None
    precondition = data.get("precondition") if isinstance(data, dict) else None
    sha = precondition.get("content_sha256") if isinstance(precondition, dict) else None
    return memory_id, sha if isinstance(sha, str) and sha else None


def audit_write(method: str, target: str, body: bytes) -> str | None:
    """Why an agent request that overwrites or deletes a memory lacks its precondition, or None."""
    sent = sent_precondition(method, target, body)
    if sent is None or sent[1] is not None:
        return None
    if method == "DELETE":
        return f"DELETE of {sent[0]} without expected_content_sha256"
    try:
        data: Any = json.loads(body or b"{}")
    except ValueError:
        data = {}
    if isinstance(data, dict) and "content" not in data:
        return None  # a rename alone overwrites no content
    return f"POST to {sent[0]} changes content without precondition.content_sha256"


def check_overwrites(
    versions: Mapping[str, list[Version]], sent: Mapping[str, set[str]], sessions: Mapping[str, str]
) -> list[Violation]:
    """``versions`` oldest first; ``sent``: memory id -> precondition hashes the sidecars sent for it."""
    out: list[Violation] = []
    session_ids = set(sessions.values())
    for store_id, history in sorted(versions.items()):
        previous: dict[str, Version] = {}
        for v in history:
            before = previous.get(v.memory_id)
            previous[v.memory_id] = v
            if before is None or v.operation == "created" or v.actor not in session_ids:
                continue
            if before.sha256 not in sent.get(v.memory_id, set()):
                out.append(
                    Violation(
                        "overwrite_without_precondition",
                        f"{store_id} {v.path}: {v.actor} {v.operation} memory {v.memory_id} over a version "
                        f"by {before.actor} whose hash it never sent as a precondition",
                    )
                )
    return out


def _reported(
    reports: Iterable[Report], store_id: str, rel: str, since: float, wanted: tuple[str, ...]
) -> bool:
    return any(
        r.store_id == store_id and r.path == rel and r.at >= since and (not wanted or r.message in wanted)
        for r in reports
    )


Held = Mapping[Folder, tuple[int, list[str]]]  # (pod, store) -> deletes held by the cap at the end, sample
Kills = Mapping[str, list[float]]  # pod -> when its sidecar was SIGKILLed


def _delete_applied(  # noqa: PLR0917 - plain-data inputs of check_local_ops
    pod: str,
    store_id: str,
    rel: str,
    last: LocalOp,
    live: Mapping[str, Mapping[str, str]],
    versions: Mapping[str, list[Version]],
    reports: Mapping[str, list[Report]],
    sessions: Mapping[str, str],
    kills: Kills | None = None,
) -> bool:
    """Gone from the store, or excused: another writer changed the path after the agent last saw the file,
    or the agent reported that the delete lost, or the agent may not have known the file was its own."""
    content = live.get(store_id, {}).get(rel)
    if content is None:
        return True
    history = versions.get(store_id, [])
    held_at = [v.at for v in history if v.path == rel and last.sha256 is not None and v.sha256 == last.sha256]
    if held_at and any(v.path == rel and v.actor != sessions[pod] and v.at > max(held_at) for v in history):
        # The file held a version of the memory that another writer has since replaced: the delete loses to
        # that newer version (the store's change wins over a local delete, as the rules say).
        return True
    since = max((v.at for v in history if v.path == rel), default=0.0)
    if (
        last.written_at is None
        and last.sha256 == content_sha256(content)
        and any(since - 1 <= k <= last.at for k in (kills or {}).get(pod, []))
    ):
        # The file held the store's memory as the agent pulled it, and the sidecar was SIGKILLed between the
        # memory's last version and the delete: the pull may have reached the disk but not the saved state.
        # Not knowing the file was its own, the agent keeps the store's memory, as it must when it cannot
        # tell a delete from a pull that never happened.
        return True
    if (
        last.created_at is not None
        and last.sha256 is not None
        and content_sha256(content) != last.sha256
        and not any(
            v.path == rel and v.actor == sessions[pod] and v.at >= last.created_at - 1 for v in history
        )
    ):
        # The test created the file and deleted it before any of it reached the store: the memory there is
        # another writer's, which this session never held; nothing of the session's was left to delete.
        return True
    seen = min(t for t in (last.at, last.blind_since, last.written_at) if t is not None)
    if last.written_at is not None and content_sha256(content) == last.sha256:
        seen = last.at  # the store holds what the file held: the delete had to go
    if any(v.path == rel and v.at >= seen - 1 and v.actor != sessions[pod] for v in history):
        return True
    if (
        last.written_at is not None
        and content_sha256(content) != last.sha256
        and _reported(reports.get(pod, []), store_id, rel, last.written_at - 1, WRITE_LOST)
    ):
        return True  # the file the test wrote lost to the store's version (reported), and still held its own
    return _reported(reports.get(pod, []), store_id, rel, last.at - 1, DELETE_LOST)


def held_at_end(
    ops: Mapping[tuple[str, str, str], LocalOp],
    live: Mapping[str, Mapping[str, str]],
    versions: Mapping[str, list[Version]],
    reports: Mapping[str, list[Report]],
    sessions: Mapping[str, str],
    held: Held,
    final_local: Mapping[Folder, Mapping[str, str | None]] | None = None,
    kills: Kills | None = None,
) -> dict[Folder, set[str]]:
    """The local deletes still in the store that the session's end reported as held back by the delete cap:
    per folder, all of those the folder does not hold again at the end when the reported count covers them
    and every path it names is a local delete (live or not: a shared store's other session may have deleted
    it); else the named ones and every one not excused otherwise.

    A local delete whose path the folder holds again was restored (another writer changed the memory after
    it): it cannot be among the held ones, which the session still means to delete."""
    missing: dict[Folder, set[str]] = defaultdict(set)
    still: dict[Folder, set[str]] = defaultdict(set)  # local deletes whose path is live, excused or not
    deleted: dict[Folder, set[str]] = defaultdict(set)  # every local delete (another session's may be done)
    for (pod, store_id, rel), last in ops.items():
        if last.kind != "delete":
            continue
        deleted[(pod, store_id)].add(rel)
        if rel not in live.get(store_id, {}) or rel in (final_local or {}).get((pod, store_id), {}):
            continue
        still[(pod, store_id)].add(rel)
        if not _delete_applied(pod, store_id, rel, last, live, versions, reports, sessions, kills):
            missing[(pod, store_id)].add(rel)
    out: dict[Folder, set[str]] = {}
    for folder in set(still) | {f for f, (count, _) in held.items() if count}:
        rels = still[folder]
        count, named = held.get(folder, (0, []))
        if not set(named) <= deleted[folder] or len(missing[folder]) > count:
            continue
        # The cap held them all (also those another writer changed meanwhile), or at least the ones named and
        # every one not excused otherwise. A named one may be gone from the store already (the other session
        # sharing it deleted the same path as both ended): new files may still wait behind it.
        out[folder] = (rels if len(rels) <= count else missing[folder]) | set(named)
    return {folder: rels for folder, rels in out.items() if rels}


def waiting_behind(
    held: Mapping[Folder, set[str]], final_local: Mapping[Folder, Mapping[str, str | None]]
) -> dict[Folder, set[str]]:
    """Local files whose create waits for one of the folder's held deletes (a file replaced by a folder of
    the same name, or the reverse): not saved when the session ends, by the documented cap."""
    out: dict[Folder, set[str]] = {}
    for folder, rels in held.items():
        below = {r + "/" for r in rels}
        ancestors = {"/".join(r.split("/")[:i]) for r in rels for i in range(1, r.count("/") + 1)}
        waiting = {
            f for f in final_local.get(folder, {}) if f in ancestors or any(f.startswith(b) for b in below)
        }
        if waiting:
            out[folder] = waiting
    return out


def check_local_ops(
    ops: Mapping[tuple[str, str, str], LocalOp],
    final_local: Mapping[Folder, Mapping[str, str | None]],
    live: Mapping[str, Mapping[str, str]],
    versions: Mapping[str, list[Version]],
    reports: Mapping[str, list[Report]],
    sessions: Mapping[str, str],
    held: Held | None = None,
    kills: Kills | None = None,
) -> list[Violation]:
    out: list[Violation] = []
    excused = held_at_end(ops, live, versions, reports, sessions, held or {}, final_local, kills)
    waiting = waiting_behind(excused, final_local)
    for (pod, store_id, rel), last in sorted(ops.items()):
        history = versions.get(store_id, [])
        where = f"{pod} {store_id} {rel} (op {last.op}: {last.source or last.kind})"
        if last.kind == "write":
            if final_local.get((pod, store_id), {}).get(rel, "") is None:
                # Named as unreadable at any time: the agent warns once per path and session; the final count
                # and sample are checked against the termination report (``check_terminations``).
                if not _reported(reports.get(pod, []), store_id, rel, 0.0, (messages.UNREADABLE,)):
                    out.append(
                        Violation("unreadable_unreported", f"{where}: unreadable at the end, never named")
                    )
                continue
            if any(v.sha256 == last.sha256 for v in history if v.path == rel):
                continue
            if _reported(reports.get(pod, []), store_id, rel, last.at - 1, WRITE_LOST):
                continue
            if rel in waiting.get((pod, store_id), set()) and _reported(
                reports.get(pod, []), store_id, rel, 0.0, (messages.WAITS_FOR_DELETE,)
            ):
                continue  # behind a delete the cap held at the end: named, and counted unsent
            out.append(
                Violation("lost_edit", f"{where}: never reached the store and no conflict was reported")
            )
        elif rel not in excused.get((pod, store_id), set()) and not _delete_applied(
            pod, store_id, rel, last, live, versions, reports, sessions, kills
        ):
            out.append(Violation("delete_not_applied", f"{where}: deleted locally, still in the store"))
    return out


def check_store_shape(
    live: Mapping[str, Mapping[str, str]],
    final_local: Mapping[Folder, Mapping[str, str | None]],
    attached: Mapping[str, list[str]],
    held: Mapping[Folder, set[str]] | None = None,
    ops: Mapping[tuple[str, str, str], LocalOp] | None = None,
    refused: Mapping[str, set[str]] | None = None,
) -> list[Violation]:
    """No content live twice in a store, other than at paths where the test itself last wrote exactly that
    content (both sessions of a shared store renamed the same file, each to its own path); no live path that
    no attached folder holds, other than local deletes the session's end reported as held back by the delete
    cap (``held``, from ``held_at_end``), and memories a session's end named as refused in that store
    (``refused``: it cannot write them locally, e.g. an unreadable file is in their way, never removed) or
    that lie below a file still unreadable at the end (the refused count covers them; only a sample is
    named)."""
    out: list[Violation] = []
    for store_id, memories in sorted(live.items()):
        counts = Counter(memories.values())
        going = {rel for (_, sid), rels in (held or {}).items() if sid == store_id for rel in rels}
        written = {
            (rel, op.sha256)
            for (_, sid, rel), op in (ops or {}).items()
            if sid == store_id and op.kind == "write"
        }
        for content, n in counts.items():
            if n > 1:
                paths = sorted(p for p, c in memories.items() if c == content)
                if len(set(paths) - going) <= 1:
                    continue  # a rename whose old path's delete the cap held at the end
                if all((p, content_sha256(content)) in written for p in set(paths) - going):
                    continue  # every copy is one the test wrote there
                out.append(Violation("duplicate", f"{store_id}: the same content is live at {paths}"))
        kept = {rel for pod in attached[store_id] for rel in final_local.get((pod, store_id), {})}
        kept |= {rel for (_, sid), rels in (held or {}).items() if sid == store_id for rel in rels}
        kept |= (refused or {}).get(store_id, set())
        # An unreadable file at the end is never removed by the agent: memories below its path cannot be
        # written in that folder (the session's end counts them as refused and names a sample).
        blind = {
            rel
            for pod in attached[store_id]
            for rel, c in final_local.get((pod, store_id), {}).items()
            if c is None
        }
        for rel in sorted(set(memories) - kept):
            if any(rel.startswith(b + "/") for b in blind):
                continue
            out.append(Violation("stray", f"{store_id} {rel}: live in the store, in no attached folder"))
    return out


def check_terminations(
    exits: Mapping[str, int],
    terminations: Mapping[str, dict[str, Any]],
    unreadable: Mapping[Folder, set[str]] | None = None,
    waiting: Mapping[Folder, set[str]] | None = None,
) -> list[Violation]:
    """Every sidecar flushed everything, except the files left unreadable at the end (``unreadable``): those,
    and only those, are unsent, counted and named (a sample of at most ``SAMPLE_MAX``) in the report; the exit
    code then says the flush was incomplete."""
    out: list[Violation] = []
    unreadable = unreadable or {}
    waiting = waiting or {}
    for pod, code in sorted(exits.items()):
        term = terminations.get(pod, {})
        stores: dict[str, dict[str, Any]] = term.get("stores", {})
        left = {sid: paths for (p, sid), paths in unreadable.items() if p == pod and paths}
        behind = {sid: paths for (p, sid), paths in waiting.items() if p == pod and paths}
        wrong = []
        for sid in sorted(set(stores) | set(left) | set(behind)):
            s, expected = stores.get(sid, {}), left.get(sid, set())
            named = set(s.get("unreadable_paths", []))
            if (
                s.get("unsent", 0) != len(expected | behind.get(sid, set()))
                or s.get("unreadable", 0) != len(expected)
                or not named <= expected
                or len(named) != min(len(expected), SAMPLE_MAX)
            ):
                wrong.append(f"{sid}: unreadable at the end {sorted(expected)}")
        complete = not left and not behind
        if wrong or code != (0 if complete else 1) or term.get("phase") != "flushed":
            out.append(
                Violation("flush_incomplete", f"{pod}: exit {code}, {wrong}, termination report {term}")
            )
        elif bool(term.get("complete")) != complete:
            out.append(Violation("flush_incomplete", f"{pod}: complete is wrong, termination report {term}"))
    return out


def conflict_count(reports: Mapping[str, list[Report]]) -> int:
    return sum(1 for rs in reports.values() for r in rs if r.message in CONFLICTS)


def summarize(violations: list[Violation], limit: int = 15) -> str:
    by_kind: dict[str, list[str]] = defaultdict(list)
    for v in violations:
        by_kind[v.kind].append(v.detail)
    lines = []
    for kind, details in sorted(by_kind.items()):
        lines.append(f"{kind}: {len(details)}")
        lines.extend(f"  {d}" for d in details[:limit])
    return "\n".join(lines)
