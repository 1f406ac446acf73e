"""The agent's paged listing (agent/listing.py ``list_level``) follows each cursor once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from memsync.agent.listing import list_level
from memsync.api.models import Memory, Page
from memsync.client import errors

SHA = "a" * 64


def memory(i: int) -> Memory:
    stamp = "2026-07-30T12:00:00Z"
    return Memory.model_validate(
        {
            "id": f"mem_{i}",
            "memory_store_id": "memstore_1",
            "path": f"/m{i}.md",
            "content_sha256": SHA,
            "content_size_bytes": 1,
            "memory_version_id": f"memver_{i}",
            "created_at": stamp,
            "updated_at": stamp,
        }
    )


class Store:
    """Answers the listing's pages from a script of next_page values, as a server would."""

    def __init__(self, cursors: list[str | None]) -> None:
        self.cursors = cursors
        self.asked: list[str | None] = []

    async def list_memories_page(self, store_id: str, *, page: str | None = None, **_: Any) -> Page[Any]:
        self.asked.append(page)
        i = len(self.asked) - 1
        return Page(data=[memory(i)], next_page=self.cursors[i % len(self.cursors)])


def context(store: Store) -> Any:
    async def api(call: Any) -> Any:
        return await call()

    return SimpleNamespace(
        id="memstore_1", client=store, recorder=SimpleNamespace(listed=lambda: None), api=api
    )


async def test_a_listing_follows_each_cursor_to_the_end() -> None:
    store = Store(["page_1", "page_2", None])
    items = await list_level(context(store), view="basic", prefix=None, depth=0)
    assert [m.path for m in items] == ["/m0.md", "/m1.md", "/m2.md"]
    assert store.asked == [None, "page_1", "page_2"]


@pytest.mark.parametrize(("cursors", "pages"), [(["page_a", "page_a"], 2), (["page_c", "page_a"], 3)])
async def test_a_cursor_handed_out_again_fails_the_listing(cursors: list[str | None], pages: int) -> None:
    """Before, the same cursor twice in a row ended the listing as if complete (the pass then saw memories
    of later pages as deleted in the store), and cursors going round were followed for ever (the client's
    walk did the same: found by the client_page fuzz target)."""
    store = Store(cursors)
    with pytest.raises(errors.InvalidResponse, match="page cursor it had returned before"):
        await list_level(context(store), view="basic", prefix=None, depth=0)
    assert len(store.asked) == pages  # the page that handed the cursor out again is the last one read
