"""A session's event history and live stream, with an optional script that plays the agent's side.

Enough of the session event API for a worker's session tool runner: the history (``GET .../events``), the
live stream (``GET .../events/stream``, server-sent events) and posting events (``POST .../events``). The
server has no model behind it; a session minted with a ``script`` replays it instead: events are emitted
in order, and after each ``agent.tool_use`` / ``agent.custom_tool_use`` the script waits until its result
has been posted before emitting the next event.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from memsync.server.bodies import validate_stored_text
from memsync.server.errors import invalid
from memsync.server.ids import new_id, now_ts
from memsync.server.storage.database import Database, Tx

EVENT_PREFIX = "sevt_"
TOOL_USE_TYPES = ("agent.tool_use", "agent.custom_tool_use")
RESULT_KEYS = {"user.tool_result": "tool_use_id", "user.custom_tool_result": "custom_tool_use_id"}
ENDED_TYPES = ("session.status_terminated", "session.deleted")
STATUS_OF_EVENT = {
    "session.status_idle": "idle",
    "session.status_running": "running",
    "session.status_rescheduled": "rescheduling",
    "session.status_terminated": "terminated",
    "session.deleted": "terminated",
}
EVENTS_PER_POST_MAX = 100
LIST_LIMIT_MAX = 1000


class PostEventsRequest(BaseModel):
    """The body of an events post: the events, each an object with a string ``type`` (``check_posted``)."""

    model_config = ConfigDict(extra="ignore")

    events: list[dict[str, Any]]


# --- pure rules -------------------------------------------------------------------------------------------


def answered_ids(history: Sequence[Mapping[str, Any]]) -> set[str]:
    out: set[str] = set()
    for event in history:
        key = RESULT_KEYS.get(str(event.get("type")))
        if key is not None and isinstance(event.get(key), str):
            out.add(event[key])
    return out


def script_due(
    history: Sequence[Mapping[str, Any]], script: Sequence[Mapping[str, Any]], position: int
) -> int:
    """How many script events, from ``position`` on, may be emitted now: up to and including the next tool
    call, and none while an emitted tool call is still unanswered."""
    answered = answered_ids(history)
    if any(e.get("type") in TOOL_USE_TYPES and e.get("id") not in answered for e in history):
        return 0
    count = 0
    for event in script[position:]:
        count += 1
        if event.get("type") in TOOL_USE_TYPES:
            break
    return count


def session_status(history: Sequence[Mapping[str, Any]]) -> str:
    status = "idle"
    for event in history:
        status = STATUS_OF_EVENT.get(str(event.get("type")), status)
        if status == "terminated":
            break
    return status


def check_posted(events: Any, *, agent_side: bool) -> list[dict[str, Any]]:
    """The posted ``events`` list, checked: objects with a string ``type``; a worker may post only ``user.*``
    events, the admin key (which scripts sessions) any type."""
    if not isinstance(events, list) or not events:
        raise invalid("events must be a non-empty list of event objects")
    if len(events) > EVENTS_PER_POST_MAX:
        raise invalid(f"events: at most {EVENTS_PER_POST_MAX} events per request, got {len(events)}")
    for i, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise invalid(f"events[{i}] must be an object with a string 'type'")
        validate_stored_text(event["type"], f"events[{i}].type")
        if not agent_side and not event["type"].startswith("user."):
            raise invalid(f"events[{i}].type {event['type']!r}: a worker may post only user.* events")
    return events


# --- live stream wake-ups ---------------------------------------------------------------------------------


class Notifier:
    """Wakes the streams of a session (asyncio, any loop) when a thread appended events to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def subscribe(self, session_id: str) -> tuple[asyncio.AbstractEventLoop, asyncio.Event]:
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(session_id, set()).add(entry)
        return entry

    def unsubscribe(self, session_id: str, entry: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(entry)
                if not waiters:
                    del self._waiters[session_id]

    def notify(self, session_id: str) -> None:
        with self._lock:
            entries = list(self._waiters.get(session_id, ()))
        for loop, event in entries:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: its stream is gone
                pass


# --- storage ------------------------------------------------------------------------------------------------


def _bodies(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [(int(row["seq"]), json.loads(row["body"])) for row in rows]


class SessionEvents:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.notifier = Notifier()

    @staticmethod
    def _append(tx: Tx, session_id: str, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        stored: list[dict[str, Any]] = []
        for event in events:
            body = {**event, "processed_at": now_ts()}
            if not isinstance(body.get("id"), str) or not body["id"]:
                body["id"] = new_id(EVENT_PREFIX)
            tx.insert_event(session_id, body["id"], body["type"], json.dumps(body))
            stored.append(body)
        return stored

    def _advance(self, tx: Tx, session_id: str, script_row: Mapping[str, Any] | None) -> None:
        if script_row is None:
            return
        script: list[dict[str, Any]] = json.loads(script_row["script"])
        position = int(script_row["position"])
        start = position
        while True:
            history = [body for _, body in _bodies(tx.events_after(session_id, 0))]
            due = script_due(history, script, position)
            if due == 0:
                break
            self._append(tx, session_id, script[position : position + due])
            position += due
        if position != start:
            tx.set_script_position(session_id, position)

    def start_script(self, tx: Tx, session_id: str, script: Sequence[Mapping[str, Any]]) -> None:
        """Inside the transaction that mints the session: store the script and emit its first events."""
        check_posted(list(script), agent_side=True)
        tx.insert_script(session_id, json.dumps(list(script)))
        self._advance(tx, session_id, tx.lock_script(session_id))

    def post(self, session_id: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with self.db.write() as tx:
            script_row = tx.lock_script(session_id)  # one poster of this session at a time
            stored = self._append(tx, session_id, events)
            self._advance(tx, session_id, script_row)
        self.notifier.notify(session_id)
        return stored

    def page(self, session_id: str, limit: int | None, page: str | None) -> dict[str, Any]:
        size = LIST_LIMIT_MAX if limit is None else limit
        if not 1 <= size <= LIST_LIMIT_MAX:
            raise invalid(f"limit must be between 1 and {LIST_LIMIT_MAX}, got {limit}")
        after = 0
        if page is not None:
            if not page.isdigit():
                raise invalid("page is not a cursor this server issued")
            after = int(page)
        with self.db.read() as tx:
            rows = _bodies(tx.events_after(session_id, after, size + 1))
        chunk = rows[:size]
        next_page = str(chunk[-1][0]) if len(rows) > size else None
        return {"data": [body for _, body in chunk], "next_page": next_page}

    def since(self, session_id: str, after_seq: int) -> list[tuple[int, dict[str, Any]]]:
        with self.db.read() as tx:
            return _bodies(tx.events_after(session_id, after_seq))

    def last_seq(self, session_id: str) -> int:
        with self.db.read_each() as tx:
            return tx.last_event_seq(session_id)

    def status(self, session_id: str) -> str:
        return session_status([body for _, body in self.since(session_id, 0)])

    def status_and_last_change(self, session_id: str) -> tuple[str, str | None]:
        """The session's status and when its latest event was processed (None: no event yet)."""
        history = [body for _, body in self.since(session_id, 0)]
        last = history[-1].get("processed_at") if history else None
        return session_status(history), last if isinstance(last, str) else None
