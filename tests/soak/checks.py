"""The soak's verdict as pure functions over plain data: what the test did, what the store and the folders
hold at the end, what the agents reported, and what went over the wire. Each returns the violations it finds.

- every local edit is in the store (some version has its content), or the agent reported a conflict for
  that path after the edit; a file still unreadable at the end is reported by name instead;
- every local delete reached the store, unless another writer changed that path after it or the agent
  reported that the delete lost;
- no write overwrote a memory without a precondition (every agent update and delete carried one);
- no memory is duplicated (one unique content live at two paths) or stray (live at a path no attached
  folder holds);
- every sidecar ended with a complete flush and nothing unsent.
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

WRITE_LOST = (messages.BOTH_CHANGED, messages.UPLOAD_LOST, messages.RECREATING)
DELETE_LOST = (messages.RESTORING, messages.DELETE_LOST)
CONFLICTS = (messages.BOTH_CHANGED, messages.UPLOAD_LOST, messages.RESTORING, messages.DELETE_LOST)
_MEMORY_URL = re.compile(r"^/v1/memory_stores/[^/]+/memories/[^/?]+$")

Folder = tuple[str, str]  # (pod, store id)


@dataclass(frozen=True)
class LocalOp:
    """The last thing the test did to one path of one folder."""

    kind: str  # "write" or "delete"
    sha256: str | None  # of the content written
    at: float  # unix time
    op: int


@dataclass(frozen=True)
class Version:
    path: str  # relative, no leading '/'
    sha256: str | None
    at: float
    actor: str  # session id or api key id


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


def audit_write(method: str, target: str, body: bytes) -> str | None:
    """Why an agent request that overwrites or deletes a memory lacks its precondition, or None."""
    url = urlsplit(target)
    if not _MEMORY_URL.match(url.path):
        return None
    if method == "DELETE" and not parse_qs(url.query).get("expected_content_sha256"):
        return f"DELETE {url.path} without expected_content_sha256"
    if method == "POST":
        try:
            data: Any = json.loads(body or b"{}")
        except ValueError:
            return f"POST {url.path} with an unreadable body"
        precondition = data.get("precondition") if isinstance(data, dict) else None
        if "content" in data and not (isinstance(precondition, dict) and precondition.get("content_sha256")):
            return f"POST {url.path} changes content without precondition.content_sha256"
    return None


def _reported(
    reports: Iterable[Report], store_id: str, rel: str, since: float, wanted: tuple[str, ...]
) -> bool:
    return any(
        r.store_id == store_id and r.path == rel and r.at >= since and (not wanted or r.message in wanted)
        for r in reports
    )


def check_local_ops(  # noqa: PLR0917 - six plain-data inputs, named at the one call site
    ops: Mapping[tuple[str, str, str], LocalOp],
    final_local: Mapping[Folder, Mapping[str, str | None]],
    live: Mapping[str, Mapping[str, str]],
    versions: Mapping[str, list[Version]],
    reports: Mapping[str, list[Report]],
    sessions: Mapping[str, str],
) -> list[Violation]:
    out: list[Violation] = []
    for (pod, store_id, rel), last in sorted(ops.items()):
        history = versions.get(store_id, [])
        where = f"{pod} {store_id} {rel} (op {last.op})"
        if last.kind == "write":
            if final_local.get((pod, store_id), {}).get(rel, "") is None:
                if not _reported(reports.get(pod, []), store_id, rel, last.at - 1, ()):
                    out.append(
                        Violation("unreadable_unreported", f"{where}: unreadable at the end, never named")
                    )
                continue
            if any(v.sha256 == last.sha256 for v in history if v.path == rel):
                continue
            if _reported(reports.get(pod, []), store_id, rel, last.at - 1, WRITE_LOST):
                continue
            out.append(
                Violation("lost_edit", f"{where}: never reached the store and no conflict was reported")
            )
        else:
            if rel not in live.get(store_id, {}):
                continue
            others = [
                v for v in history if v.path == rel and v.at >= last.at - 1 and v.actor != sessions[pod]
            ]
            if others or _reported(reports.get(pod, []), store_id, rel, last.at - 1, DELETE_LOST):
                continue
            out.append(Violation("delete_not_applied", f"{where}: deleted locally, still in the store"))
    return out


def check_store_shape(
    live: Mapping[str, Mapping[str, str]],
    final_local: Mapping[Folder, Mapping[str, str | None]],
    attached: Mapping[str, list[str]],
) -> list[Violation]:
    """No content live twice in a store; no live path that no attached folder holds."""
    out: list[Violation] = []
    for store_id, memories in sorted(live.items()):
        counts = Counter(memories.values())
        for content, n in counts.items():
            if n > 1:
                paths = sorted(p for p, c in memories.items() if c == content)
                out.append(Violation("duplicate", f"{store_id}: the same content is live at {paths}"))
        held = {rel for pod in attached[store_id] for rel in final_local.get((pod, store_id), {})}
        for rel in sorted(set(memories) - held):
            out.append(Violation("stray", f"{store_id} {rel}: live in the store, in no attached folder"))
    return out


def check_terminations(
    exits: Mapping[str, int], terminations: Mapping[str, dict[str, Any]]
) -> list[Violation]:
    out: list[Violation] = []
    for pod, code in sorted(exits.items()):
        term = terminations.get(pod, {})
        unsent = {sid: s.get("unsent") for sid, s in term.get("stores", {}).items() if s.get("unsent")}
        if code != 0 or term.get("phase") != "flushed" or not term.get("complete") or unsent:
            out.append(Violation("flush_incomplete", f"{pod}: exit {code}, termination report {term}"))
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
