"""What the store browser (``server/ui``) reads besides the API's own endpoints: the stores with their
tallies, a search of a store's memories by path prefix and content, its deleted memories with their last
versions, and who wrote to it in a time window.

Every read checks the caller's reach to the store as the API does (``_store_for``) and answers the API's
wire JSON for stores, memories and versions (``serialize``), so the pages read the same objects as the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memsync.server.access import Principal
from memsync.server.errors import invalid
from memsync.server.stores import rules
from memsync.server.stores.core import ServiceCore
from memsync.server.stores.serialize import actor_json, memory_json, store_json, version_json

__all__ = ["AuditOperations", "Listing"]

STORES_PER_PAGE = 50
SEARCH_LIMIT = 100
DELETED_PER_PAGE = 50
WRITERS_LIMIT = 500
NEEDLE_MAX = 1024


@dataclass(frozen=True)
class Listing:
    """One page of a browser listing and the cursor of the next (None: the last page)."""

    items: list[dict[str, Any]] = field(default_factory=list)
    next_page: str | None = None


class AuditOperations(ServiceCore):
    """The store browser's reads."""

    def store_summaries(self, p: Principal, page: str | None) -> Listing:
        """Every store the caller reaches, archived ones included, newest first, each with ``tally``: its
        memories, versions, deletions and last write."""
        query: dict[str, object] = {"kind": "browser_stores", "scope": p.scope}
        position = self._position(page, query)
        if position is not None and not isinstance(position, int):
            raise invalid("page cursor does not belong to the store list")
        with self.db.read() as tx:
            rows = self._stores_page(
                tx, p, include_archived=True, before_seq=position, limit=STORES_PER_PAGE + 1
            )
            shown = rows[:STORES_PER_PAGE]
            tallies = tx.store_tallies([r.id for r in shown])
        items = [{**store_json(r), "tally": tallies[r.id]} for r in shown]
        more = len(rows) > STORES_PER_PAGE
        return Listing(items, self._next_page(shown[-1].seq, query) if more and shown else None)

    def search_memories(
        self, p: Principal, store_id: str, *, prefix: str, needle: str, after: str = ""
    ) -> Listing:
        """The memories whose path starts with ``prefix`` (any text, not only a folder) and whose content
        holds ``needle`` (an exact, case-sensitive substring; any content when empty), in path order; the
        next page resumes after the last path (``next_page`` is that path)."""
        if len(needle) > NEEDLE_MAX:
            raise invalid(f"the searched text is at most {NEEDLE_MAX} characters, got {len(needle)}")
        lower = prefix or "/"
        with self.db.read() as tx:
            self._store_for(tx, p, store_id, write=False)
            rows = tx.search_memories(
                store_id,
                lower=lower,
                upper=rules.text_upper_bound(lower),
                after=after,
                needle=needle,
                limit=SEARCH_LIMIT + 1,
            )
        shown = rows[:SEARCH_LIMIT]
        more = len(rows) > SEARCH_LIMIT
        return Listing([memory_json(r, "basic") for r in shown], shown[-1].path if more else None)

    def deleted_memories(self, p: Principal, store_id: str, page: str | None) -> Listing:
        """The store's deleted memories, most recently deleted first: each deletion's version, with
        ``last_version`` the last version that wrote the memory's content (None if it was redacted away)."""
        query: dict[str, object] = {"kind": "browser_deleted", "store": store_id}
        position = self._position(page, query)
        if position is not None and not isinstance(position, int):
            raise invalid("page cursor does not belong to a list of deleted memories")
        with self.db.read() as tx:
            self._store_for(tx, p, store_id, write=False)
            rows = tx.deletions(store_id, before_seq=position, limit=DELETED_PER_PAGE + 1)
            shown = rows[:DELETED_PER_PAGE]
            last = {r.memory_id: tx.last_written_version(store_id, r.memory_id) for r in shown}
        items = []
        for row in shown:
            before = last[row.memory_id]
            items.append(
                {**version_json(row, "basic"), "last_version": before and version_json(before, "basic")}
            )
        more = len(rows) > DELETED_PER_PAGE
        return Listing(items, self._next_page(shown[-1].seq, query) if more and shown else None)

    def writers(self, p: Principal, store_id: str, *, gte: str, lte: str) -> list[dict[str, Any]]:
        """Who wrote to the store between ``gte`` and ``lte`` (server timestamps), most recent first: each
        actor's writes by operation, first and last write, and for a session its record (created, expires,
        revoked; None if the session is gone)."""
        with self.db.read() as tx:
            self._store_for(tx, p, store_id, write=False)
            rows = tx.writers(store_id, gte=gte, lte=lte, limit=WRITERS_LIMIT)
            sessions = {
                r.actor_id: tx.get_session(r.actor_id)
                for r in rows
                if r.actor_type == "session_actor" and r.actor_id is not None
            }
        items = []
        for r in rows:
            session = sessions.get(r.actor_id) if r.actor_id is not None else None
            items.append(
                {
                    "actor": actor_json(r.actor_type, r.actor_id),
                    "writes": r.writes,
                    "created": r.created,
                    "modified": r.modified,
                    "deleted": r.deleted,
                    "first_write": r.first_write,
                    "last_write": r.last_write,
                    "session": None
                    if session is None
                    else {
                        "created_at": session.created_at,
                        "expires_at": session.expires_at,
                        "revoked_at": session.revoked_at,
                    },
                }
            )
        return items
