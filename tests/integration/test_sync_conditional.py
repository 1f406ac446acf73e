"""Conditional listing in the sync agent: against the memsync store server (which sends ETags) a pass over an
unchanged store is one request, and a change is never hidden by the reused listing; against a server that
sends no ETag (the hosted API) every pass lists the store in full."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from support.sync_harness import Harness, make_harness

pytestmark = pytest.mark.both_backends

# more than FANOUT_MIN memories, in folders: a full listing takes several requests
FILES = {f"topic-{i % 4}/note-{i:03d}.md": f"note {i}" for i in range(130)}


@pytest.fixture
async def h(store_server, tmp_path: Path):
    harness = await make_harness(store_server.url, store_server.admin_key, tmp_path, files=FILES)
    try:
        yield harness
    finally:
        await harness.aclose()


async def test_an_unchanged_store_costs_one_request_and_changes_still_arrive(h: Harness) -> None:
    first = await h.sync()
    assert first.outcome == "synced"
    assert first.list_requests > 2  # the probe, then the full listing (root at depth 1, then the folders)

    seen = len(h.transport.seen)
    quiet = await h.sync()
    assert quiet.list_requests == 1
    assert len(h.transport.seen) - seen == 1  # the whole pass: one conditional request, answered 304
    assert (quiet.fetches, quiet.uploads, quiet.deletes) == (0, 0, 0)

    await h.put("topic-2/note-002.md", "changed remotely")
    changed = await h.sync()
    assert changed.list_requests > 2  # the probe missed: listed in full
    assert h.read("topic-2/note-002.md") == "changed remotely"

    h.write("topic-1/note-001.md", "changed locally")
    pushed = await h.sync()
    assert pushed.uploads == 1
    after_own_write = await h.sync()  # the agent's own upload changed the store: one more full listing
    assert after_own_write.list_requests > 1
    assert (await h.sync()).list_requests == 1
    assert (await h.remote())["topic-1/note-001.md"] == "changed locally"


async def test_without_etags_every_pass_lists_in_full(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = h.transport.handle_async_request

    async def without_etag(request: httpx.Request) -> httpx.Response:
        assert "if-none-match" not in request.headers  # never conditional against such a server
        response = await inner(request)
        if "etag" in response.headers:
            del response.headers["etag"]
        return response

    monkeypatch.setattr(h.transport, "handle_async_request", without_etag)
    first = await h.sync()
    full = first.list_requests - 1  # the one probe that found no ETag
    assert full > 2
    again = await h.sync()
    assert again.list_requests == full  # not probed again: a full listing, as before the extension
    await h.put("topic-3/note-003.md", "changed remotely")
    await h.sync()
    assert h.read("topic-3/note-003.md") == "changed remotely"
