"""``memsync status`` as text and JSON: the summaries of ``view.py`` rendered as kubectl prints its tables.

Pure: the summaries and ``now`` come from the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic.alias_generators import to_camel

from memsync.status.table import table
from memsync.status.view import NONE, SessionDetail, SessionSummary, StoreRow, parse_time

# --------------------------------------------------------------------------------------------------
# Times
# --------------------------------------------------------------------------------------------------


def age(value: str | None, now: datetime) -> str:
    """How long ago, as kubectl shows it: 45s, 12m, 3h, 2d (``<unknown>`` for no time)."""
    when = parse_time(value)
    if when is None:
        return "<unknown>"
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# --------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------


def _stores_cell(stores: Sequence[StoreRow]) -> str:
    return ",".join(f"{s.label}:{s.health}" for s in stores) or NONE


def render_list(
    summaries: Sequence[SessionSummary], *, now: datetime, all_namespaces: bool, wide: bool = False
) -> str:
    """The list; ``wide`` adds each session's id, its sandbox Pod and the refused files of its stores."""
    headers = ["NAME", "PHASE", "STORES", "LAST SYNC", "CONFLICTS", "AGE"]
    rows = [
        [
            s.name,
            s.phase,
            _stores_cell(s.stores),
            age(s.last_sync_time, now) if s.last_sync_time else NONE,
            str(s.conflicts),
            age(s.created, now),
        ]
        for s in summaries
    ]
    if wide:
        headers += ["REFUSED", "SESSION", "POD"]
        for s, row in zip(summaries, rows, strict=True):
            row += [str(sum(st.counts.refused for st in s.stores)), s.session_id or NONE, s.pod_name or NONE]
    if all_namespaces:
        headers.insert(0, "NAMESPACE")
        for s, row in zip(summaries, rows, strict=True):
            row.insert(0, s.namespace)
    return table(headers, rows)


def _when(value: str | None, now: datetime) -> str:
    return f"{value} ({age(value, now)} ago)" if value else NONE


def _section(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A titled, indented table, or ``<none>`` under the title."""
    return f"{title}\n" + (table(headers, rows, "  ") if rows else f"  {NONE}")


def render_detail(d: SessionDetail, *, now: datetime) -> str:
    s = d.summary
    fields = [
        ("Name", s.name),
        ("Namespace", s.namespace),
        ("Session", s.session_id or NONE),
        ("Phase", s.phase),
        ("Message", s.message or NONE),
        ("Last sync", _when(s.last_sync_time, now)),
        ("Conflicts", str(s.conflicts)),
        ("Created", _when(s.created, now)),
    ]
    width = max(len(k) for k, _ in fields) + 2
    parts = ["\n".join(f"{k + ':':<{width}}{v}" for k, v in fields)]

    store_rows = [
        [
            r.label,
            r.store_id,
            r.health,
            NONE if r.memories_mounted is None else str(r.memories_mounted),
            *(
                str(n)
                for n in (
                    r.counts.uploaded,
                    r.counts.downloaded,
                    r.counts.deleted,
                    r.counts.conflicts,
                    r.counts.refused,
                    r.counts.unsent,
                )
            ),
        ]
        for r in s.stores
    ]
    headers = ["STORE", "ID", "HEALTH", "MOUNTED", "UPLOADED", "DOWNLOADED", "DELETED", "CONFLICTS"]
    text = _section("Stores:", [*headers, "REFUSED", "UNSENT"], store_rows)
    notes = [
        f"  {r.label}: {what} {', '.join(paths)}"
        for r in s.stores
        for what, paths in (
            ("refused paths", r.counts.refused_paths),
            ("unreadable paths", r.counts.unreadable_paths),
            ("deletions held back", r.counts.held_delete_paths),
        )
        if paths
    ]
    parts.append("\n".join([text, *notes]))

    cond_rows = [
        [c.type, c.status, c.reason, age(c.last_transition_time, now), c.message] for c in d.conditions
    ]
    parts.append(_section("Conditions:", ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], cond_rows))

    if d.pod is None:
        gone = f"{s.pod_name} (not found)" if s.pod_name else NONE
        parts.append(f"Pod: {gone}")
    else:
        p = d.pod
        where = ", ".join(
            x
            for x in (
                p.phase,
                f"node {p.node}" if p.node else "",
                f"IP {p.ip}" if p.ip else "",
                "terminating" if p.terminating else "",
            )
            if x
        )
        rows = [
            [c.name, c.role, c.state, "yes" if c.ready else "no", str(c.restarts), c.detail]
            for c in p.containers
        ]
        headers = ["CONTAINER", "ROLE", "STATE", "READY", "RESTARTS", "DETAIL"]
        parts.append(_section(f"Pod: {p.name} ({where})", headers, rows))

    event_rows = [
        [
            age(e.last_seen, now),
            e.type,
            e.reason,
            e.object,
            e.message + (f" (x{e.count})" if e.count > 1 else ""),
        ]
        for e in d.events
    ]
    parts.append(_section("Events:", ["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"], event_rows))
    return "\n\n".join(parts)


def _camel(value: Any) -> Any:
    if isinstance(value, dict):
        return {to_camel(k): _camel(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_camel(v) for v in value]
    return value


def as_json(value: SessionSummary | SessionDetail | Sequence[SessionSummary]) -> Any:
    """JSON-ready data, camelCase like the resource itself; a list is ``{"items": [...]}``."""
    if isinstance(value, SessionSummary | SessionDetail):
        return _camel(dataclasses.asdict(value))
    return {"items": [as_json(s) for s in value]}
