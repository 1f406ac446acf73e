"""Golden scenarios: one per case of docs/sync-semantics.md, against the real store server.

Each test starts a store, mounts it (the same code as ``memsync mount``), makes local and remote changes,
runs passes (the same code as ``memsync sync --once``), and asserts the store, the folder and the log lines.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from memsync.agent import messages
from memsync.agent.localfs import StoreRoot
from memsync.api.hashing import content_sha256
from support.sync_harness import Harness, make_harness

FILES = {"a.md": "alpha", "b.md": "bravo", "notes/c.md": "charlie", "notes/d.md": "delta"}


def logged(caplog: pytest.LogCaptureFixture, fragment: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if fragment in r.getMessage()]


def paths_of(records: list[logging.LogRecord]) -> list[str]:
    return [getattr(r, "path", "") for r in records]


@pytest.fixture
def caplog_agent(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="memsync.agent")
    return caplog


@pytest.fixture
async def h(store_server, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = await make_harness(
        store_server.url, store_server.admin_key, tmp_path, files=FILES, delete_window=30
    )
    try:
        yield harness
    finally:
        await harness.aclose()


async def make(store_server, tmp_path: Path, **kw) -> Harness:
    return await make_harness(store_server.url, store_server.admin_key, tmp_path, **kw)


# --- the mount (docs/sync-semantics.md#mount) -------------------------------------------------------------


async def test_mount_materialises_every_memory_and_the_marker(h: Harness) -> None:
    assert h.local_files() == FILES
    marker = (h.root / ".anthropic-memory-store").read_text()
    assert marker == f"version 1\n{h.store_id}"
    assert (h.root.stat().st_mode & 0o777) == 0o700
    assert ((h.root / "a.md").stat().st_mode & 0o777) == 0o600
    state = h.state()
    assert state.baseline == {rel: content_sha256(text) for rel, text in FILES.items()}


async def test_no_change_pass_hashes_nothing_and_transfers_no_content(h: Harness) -> None:
    first = await h.sync()  # files written within 2 s are re-hashed (coarse clocks): the first pass may hash
    assert first.outcome == "synced"
    await asyncio.sleep(2.1)
    await h.sync()
    stats = await h.sync()
    assert stats.hashed == 0
    assert (stats.fetches, stats.uploads, stats.deletes) == (0, 0, 0)
    assert stats.list_requests == 1  # a 4-memory store: one depth=0 page


# --- step 1: the trust check ------------------------------------------------------------------------------


async def test_bad_marker_with_files_leaves_the_folder_as_found(h: Harness, caplog_agent) -> None:
    (h.root / ".anthropic-memory-store").write_text("version 1\nmemstore_someone_else")
    h.write("a.md", "local edit")
    (h.root / "b.md").unlink()
    await h.put("notes/c.md", "remote edit")
    stats = await h.sync()
    assert stats.outcome == "left"
    assert logged(caplog_agent, messages.LEFT_AS_FOUND)
    remote = await h.remote()
    assert remote["a.md"] == "alpha" and remote["b.md"] == "bravo"  # nothing pushed, nothing deleted
    assert h.read("notes/c.md") == "charlie"  # nothing pulled


async def test_missing_marker_and_no_files_recovers_by_downloading(h: Harness, caplog_agent) -> None:
    for child in h.root.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    stats = await h.sync()
    assert stats.outcome == "recovered"
    assert h.local_files() == FILES
    assert await h.remote() == FILES  # recovery never deletes or uploads


async def test_vanished_folder_is_recreated_and_downloaded(h: Harness) -> None:
    shutil.rmtree(h.root)
    stats = await h.sync()
    assert stats.outcome == "recovered"
    assert h.local_files() == FILES
    assert (h.root / ".anthropic-memory-store").is_file()
    assert await h.remote() == FILES
    assert (await h.sync()).outcome == "synced"  # the new folder's identity is adopted


# --- step 2: settling sends whose outcome was unknown -----------------------------------------------------


async def test_lost_upload_response_is_settled_by_the_next_listing(h: Harness, caplog_agent) -> None:
    # An upload of "B" reached the store but its response was lost (state still has the old baseline and
    # sent_shas records B); meanwhile the agent edited the file again to "C".
    await h.put("a.md", "B")
    state = h.state()
    state.sent_shas["a.md"] = content_sha256("B")
    h.save(state)
    h.write("a.md", "C")
    await h.sync()
    assert (await h.remote())["a.md"] == "C"  # not mistaken for a conflict: the edit survives
    assert not logged(caplog_agent, messages.BOTH_CHANGED)
    assert h.state().sent_shas == {}


# --- step 3: wipe detection -------------------------------------------------------------------------------


async def test_wiped_folder_with_marker_is_redownloaded_not_deleted(h: Harness, caplog_agent) -> None:
    for rel in FILES:
        (h.root / rel).unlink()
    stats = await h.sync(final=True)  # even with the delete window waived
    assert stats.outcome == "recovered"
    assert await h.remote() == FILES
    assert h.local_files() == FILES
    assert not logged(caplog_agent, messages.PROPAGATED_DELETE)


async def test_single_missing_file_with_marker_is_an_ordinary_deletion(
    store_server, tmp_path, caplog_agent
) -> None:
    h = await make(store_server, tmp_path, files=FILES, delete_window=0)
    try:
        (h.root / "b.md").unlink()
        await h.sync()
        assert "b.md" not in await h.remote()
        assert paths_of(logged(caplog_agent, messages.PROPAGATED_DELETE)) == ["/b.md"]
    finally:
        await h.aclose()


async def test_edit_after_an_interrupted_recovery_is_uploaded_not_lost(h: Harness, caplog_agent) -> None:
    # The folder is wiped; the recovery that follows fails half-way (the store is unreachable), so the
    # baseline it cleared stays empty. The agent then writes a file the store still holds unchanged: that is
    # an edit to upload (the store did not change), not a conflict the store wins.
    for rel in FILES:
        (h.root / rel).unlink()
    shutil.rmtree(h.root / "notes")

    async def unreachable(request: httpx.Request) -> None:
        raise httpx.UnsupportedProtocol("the store is unreachable", request=request)

    h.transport.once(lambda r: r.method == "GET", unreachable)
    failed = await h.sync()
    assert failed.outcome == "failed"
    assert h.state().baseline == {}  # the wipe can never turn into deletions...
    h.write("a.md", "written after the wipe")
    await h.sync()
    assert (await h.remote())["a.md"] == "written after the wipe"  # ...and the edit is not lost either
    assert h.read("a.md") == "written after the wipe"
    assert not logged(caplog_agent, messages.BOTH_CHANGED)
    assert await h.remote() == {**FILES, "a.md": "written after the wipe"}
    await h.sync()
    assert h.local_files() == {**FILES, "a.md": "written after the wipe"}  # the rest came back down


async def test_flush_after_an_interrupted_recovery_uploads_the_edit(h: Harness, caplog_agent) -> None:
    for rel in FILES:
        (h.root / rel).unlink()

    async def unreachable(request: httpx.Request) -> None:
        raise httpx.UnsupportedProtocol("the store is unreachable", request=request)

    h.transport.once(lambda r: r.method == "GET", unreachable)
    assert (await h.sync()).outcome == "failed"
    h.write("a.md", "written after the wipe")
    out = await h.flush()
    assert (await h.remote())["a.md"] == "written after the wipe"
    assert out.stores[h.store_id]["conflicts"] == 0 and out.complete
    assert not logged(caplog_agent, messages.UPLOAD_LOST)


# --- step 4: the per-path merge ---------------------------------------------------------------------------


async def test_remote_and_local_both_gone_drops_the_path(h: Harness) -> None:
    (h.root / "a.md").unlink()
    await h.delete("a.md")
    await h.sync()
    assert "a.md" not in h.state().baseline
    assert "a.md" not in await h.remote()


async def test_deleted_remotely_unchanged_locally_is_removed(h: Harness) -> None:
    await h.delete("notes/c.md")
    await h.sync()
    assert h.read("notes/c.md") is None
    assert "notes/c.md" not in h.state().baseline
    assert h.read("notes/d.md") == "delta"


async def test_deleted_remotely_edited_locally_is_recreated(h: Harness, caplog_agent) -> None:
    await h.delete("a.md")
    h.write("a.md", "my edit")
    await h.sync()
    assert (await h.remote())["a.md"] == "my edit"
    assert paths_of(logged(caplog_agent, messages.RECREATING)) == ["/a.md"]


async def test_read_only_deleted_remotely_edited_locally_keeps_the_file(
    store_server, tmp_path, caplog_agent
) -> None:
    h = await make(store_server, tmp_path, files=FILES, access="read_only")
    try:
        await h.delete("a.md")
        h.write("a.md", "my edit")
        await h.sync()
        assert h.read("a.md") == "my edit"
        assert "a.md" not in await h.remote()
        assert logged(caplog_agent, messages.READ_ONLY_LOCAL_EDIT)
    finally:
        await h.aclose()


async def test_deleted_locally_changed_remotely_restores_the_remote_version(h: Harness, caplog_agent) -> None:
    (h.root / "a.md").unlink()
    await h.put("a.md", "remote edit")
    await h.sync(final=True)
    assert h.read("a.md") == "remote edit"
    assert (await h.remote())["a.md"] == "remote edit"
    assert paths_of(logged(caplog_agent, messages.RESTORING)) == ["/a.md"]


async def test_same_change_on_both_sides_is_adopted_without_fetching(h: Harness, caplog_agent) -> None:
    await h.put("a.md", "same")
    h.write("a.md", "same")
    stats = await h.sync()
    assert stats.fetches == 0 and stats.uploads == 0
    assert h.state().baseline["a.md"] == content_sha256("same")
    assert not logged(caplog_agent, messages.BOTH_CHANGED)


async def test_changed_on_both_sides_keeps_the_remote_version(h: Harness, caplog_agent) -> None:
    await h.put("a.md", "remote wins")
    h.write("a.md", "local loses")
    await h.sync()
    assert h.read("a.md") == "remote wins"
    assert (await h.remote())["a.md"] == "remote wins"
    assert paths_of(logged(caplog_agent, messages.BOTH_CHANGED)) == ["/a.md"]


async def test_read_only_changed_on_both_sides_warns_and_keeps_the_remote(
    store_server, tmp_path, caplog_agent
) -> None:
    h = await make(store_server, tmp_path, files=FILES, access="read_only")
    try:
        await h.put("a.md", "remote")
        h.write("a.md", "local")
        await h.sync()
        assert h.read("a.md") == "remote"
        assert paths_of(logged(caplog_agent, messages.BOTH_CHANGED)) == ["/a.md"]
    finally:
        await h.aclose()


async def test_remote_change_is_pulled_and_new_remote_file_appears(h: Harness) -> None:
    await h.put("b.md", "bravo 2")
    await h.put("deep/er/new.md", "fresh")
    await h.sync()
    assert h.read("b.md") == "bravo 2"
    assert h.read("deep/er/new.md") == "fresh"
    assert ((h.root / "deep").stat().st_mode & 0o777) == 0o700


async def test_local_change_is_uploaded_with_a_precondition(h: Harness) -> None:
    h.write("notes/d.md", "delta 2")
    h.write("brand/new.md", "new file")
    stats = await h.sync()
    assert stats.uploads == 2
    remote = await h.remote()
    assert remote["notes/d.md"] == "delta 2" and remote["brand/new.md"] == "new file"
    assert await h.versions("notes/d.md") == 2
    again = await h.sync()
    assert again.uploads == 0  # nothing is uploaded twice


async def test_read_only_store_never_pushes(store_server, tmp_path, caplog_agent) -> None:
    h = await make(store_server, tmp_path, files=FILES, access="read_only", delete_window=0)
    try:
        h.write("a.md", "local edit")
        h.write("new.md", "new")
        (h.root / "b.md").unlink()
        await h.sync(final=True)
        out = await h.final()
        assert await h.remote() == FILES
        assert logged(caplog_agent, messages.READ_ONLY_LOCAL_EDIT)
        assert out.complete and out.stores[h.store_id]["uploaded"] == 0
        await h.put("a.md", "remote edit")
        await h.sync()
        assert h.read("a.md") == "remote edit"  # the next remote change overwrites the local edit
    finally:
        await h.aclose()


# --- step 5: corroborated deletes --------------------------------------------------------------------------


async def test_local_deletion_waits_for_the_window_then_goes_out(h: Harness, caplog_agent) -> None:
    (h.root / "a.md").unlink()
    first = await h.sync()
    assert first.deletes == 0 and "a.md" in await h.remote()
    assert "a.md" in h.state().pending_deletes
    h.clock.now += 29
    await h.sync()
    assert "a.md" in await h.remote()
    h.clock.now += 2
    await h.sync()
    assert "a.md" not in await h.remote()
    assert paths_of(logged(caplog_agent, messages.PROPAGATED_DELETE)) == ["/a.md"]


async def test_reappeared_file_clears_the_pending_delete(h: Harness) -> None:
    (h.root / "a.md").unlink()
    await h.sync()
    h.write("a.md", "alpha")
    h.clock.now += 60
    await h.sync()
    assert h.state().pending_deletes == {}
    assert (await h.remote())["a.md"] == "alpha"


async def test_pending_delete_survives_a_restart(h: Harness) -> None:
    (h.root / "a.md").unlink()
    await h.sync()
    h.restart()
    h.clock.now += 31
    await h.sync()
    assert "a.md" not in await h.remote()


async def test_deletions_disabled_never_deletes(store_server, tmp_path, caplog_agent) -> None:
    h = await make(store_server, tmp_path, files=FILES, deletions="disabled", delete_window=0)
    try:
        (h.root / "a.md").unlink()
        await h.sync()
        await h.final()
        assert "a.md" in await h.remote()
        assert logged(caplog_agent, messages.DELETES_DISABLED)
    finally:
        await h.aclose()


async def test_log_only_logs_what_it_would_delete(store_server, tmp_path, caplog_agent) -> None:
    h = await make(store_server, tmp_path, files=FILES, deletions="log_only", delete_window=0)
    try:
        (h.root / "a.md").unlink()
        await h.sync()
        await h.sync()
        assert "a.md" in await h.remote()
        assert paths_of(logged(caplog_agent, messages.LOG_ONLY_DELETE)) == ["/a.md", "/a.md"]  # every sync
    finally:
        await h.aclose()


async def test_delete_cap_holds_the_rest_for_later_syncs(store_server, tmp_path, caplog_agent) -> None:
    files = {f"f{i:02d}.md": str(i) for i in range(12)}
    h = await make(store_server, tmp_path, files=files, delete_window=0)
    try:
        for rel in files:
            (h.root / rel).unlink()
        h.write("keep.md", "so the folder is not taken for a wipe")
        first = await h.sync()
        assert first.deletes == 8  # max(8, min(50, 12 // 4))
        assert logged(caplog_agent, f"{messages.DELETE_CAP}: sent 8 deletes, held 4 for later syncs")
        assert len(await h.remote()) == 5
        await h.sync()
        assert await h.remote() == {"keep.md": "so the folder is not taken for a wipe"}
    finally:
        await h.aclose()


async def test_delete_refused_when_the_remote_changed_meanwhile(store_server, tmp_path, caplog_agent) -> None:
    h = await make(store_server, tmp_path, files=FILES, delete_window=0)
    try:
        (h.root / "a.md").unlink()

        async def change_remote(_: httpx.Request) -> None:
            await h.put("a.md", "changed in between")

        h.transport.once(lambda r: r.method == "DELETE", change_remote)
        await h.sync()
        assert paths_of(logged(caplog_agent, messages.DELETE_LOST)) == ["/a.md"]
        assert (await h.remote())["a.md"] == "changed in between"
        await h.sync()
        assert h.read("a.md") == "changed in between"  # the file comes back by pull next sync
    finally:
        await h.aclose()


# --- step 6: the content pass -----------------------------------------------------------------------------


async def test_pull_of_a_memory_deleted_after_the_listing_is_ignored(h: Harness) -> None:
    await h.put("b.md", "bravo 2")

    async def delete_first(_: httpx.Request) -> None:
        await h.delete("b.md")

    h.transport.once(lambda r: r.method == "GET" and "/memories/mem_" in r.url.path, delete_first)
    stats = await h.sync()
    assert stats.outcome == "synced"
    assert h.read("b.md") == "bravo"
    await h.sync()
    assert h.read("b.md") is None  # deleted remotely, unchanged locally


async def test_a_pass_cancelled_while_a_pull_writes_records_the_written_file(
    h: Harness, monkeypatch: pytest.MonkeyPatch, caplog_agent
) -> None:
    """SIGTERM cancels a pass while a pulled memory is being written: the write ends in its thread, and the
    state saved by the cancelled pass records it. Otherwise the next pass takes the store's bytes on disk for
    a local edit, and re-creates the memory that another writer renamed meanwhile (a duplicate)."""
    await h.put("b.md", "bravo 2")
    entered, release = threading.Event(), threading.Event()
    replace_if = StoreRoot.replace_if  # the pull's compare-and-swap write

    def slow_write(self: StoreRoot, rel: str, data: bytes, expected_sha: str | None) -> bool:
        entered.set()
        release.wait(timeout=30)
        return replace_if(self, rel, data, expected_sha)

    monkeypatch.setattr(StoreRoot, "replace_if", slow_write)
    running = asyncio.create_task(h.sync())
    assert await asyncio.to_thread(entered.wait, 30), "the pull never reached its write"
    running.cancel()
    await asyncio.sleep(0.05)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    monkeypatch.setattr(StoreRoot, "replace_if", replace_if)
    assert h.read("b.md") == "bravo 2"
    assert h.state().baseline["b.md"] == content_sha256("bravo 2")
    await h.delete("b.md")  # another writer renamed it
    await h.put("moved.md", "bravo 2")
    await h.sync()
    assert "b.md" not in await h.remote() and h.read("b.md") is None
    assert not logged(caplog_agent, messages.RECREATING)


async def test_local_edit_made_during_the_pass_is_not_overwritten_silently(h: Harness) -> None:
    await h.put("b.md", "remote")

    async def edit_locally(_: httpx.Request) -> None:
        h.write("b.md", "local, after the scan")

    h.transport.once(lambda r: r.method == "GET" and "/memories/mem_" in r.url.path, edit_locally)
    await h.sync()
    assert h.read("b.md") == "local, after the scan"


# --- upload rules (docs/sync-semantics.md#uploads-and-preconditions) ----------------------------------------


async def test_update_refused_by_precondition_loses_and_pulls_the_winner(h: Harness, caplog_agent) -> None:
    h.write("a.md", "local")

    async def change_remote(_: httpx.Request) -> None:
        await h.put("a.md", "remote, after the listing")

    h.transport.once(lambda r: r.method == "POST" and "/memories/mem_" in r.url.path, change_remote)
    await h.sync()
    assert paths_of(logged(caplog_agent, messages.UPLOAD_LOST)) == ["/a.md"]
    await h.sync()
    assert h.read("a.md") == "remote, after the listing"


async def test_update_of_a_memory_deleted_after_the_listing_becomes_a_create(h: Harness) -> None:
    h.write("a.md", "local")

    async def delete_remote(_: httpx.Request) -> None:
        await h.delete("a.md")

    h.transport.once(lambda r: r.method == "POST" and "/memories/mem_" in r.url.path, delete_remote)
    await h.sync()
    assert (await h.remote())["a.md"] == "local"


async def test_oversized_file_is_refused_until_it_changes(h: Harness, caplog_agent) -> None:
    h.write("big.md", "x" * 102_401)
    h.write("ok.md", "fine")
    await h.sync()
    await h.sync()
    remote = await h.remote()
    assert "big.md" not in remote and remote["ok.md"] == "fine"  # other files keep syncing
    assert paths_of(logged(caplog_agent, messages.LOCAL_REFUSED)) == ["/big.md"]  # warned once
    assert h.state().refused_shas["big.md"] == content_sha256("x" * 102_401)
    h.write("big.md", "small now")
    await h.sync()
    assert (await h.remote())["big.md"] == "small now"
    assert "big.md" not in h.state().refused_shas


async def test_non_utf8_file_is_refused_and_kept(h: Harness, caplog_agent) -> None:
    h.write("bin.dat", b"\xff\xfe\x00binary")
    await h.sync()
    assert "bin.dat" not in await h.remote()
    assert (h.root / "bin.dat").read_bytes() == b"\xff\xfe\x00binary"
    assert paths_of(logged(caplog_agent, messages.LOCAL_REFUSED)) == ["/bin.dat"]


async def test_create_racing_a_remote_create_of_the_same_content_is_adopted(h: Harness) -> None:
    h.write("race.md", "same bytes")

    async def create_remote(_: httpx.Request) -> None:
        await h.put("race.md", "same bytes")

    h.transport.once(lambda r: r.method == "POST" and r.url.path.endswith("/memories"), create_remote)
    await h.sync()
    assert h.state().baseline["race.md"] == content_sha256("same bytes")
    assert await h.versions("race.md") == 1


def _is_create(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/memories")


async def _lose_response(request: httpx.Request, response: httpx.Response) -> httpx.Response:
    raise httpx.ReadError("connection reset after the server answered", request=request)


async def _anonymous_blocker(request: httpx.Request, response: httpx.Response) -> httpx.Response:
    # The hosted API may answer a path conflict with conflicting_memory_id "" (it cannot name the blocker).
    body = json.loads(response.content)
    body["error"]["conflicting_memory_id"] = ""
    return httpx.Response(response.status_code, headers={"content-type": "application/json"}, json=body)


async def test_retried_create_whose_first_attempt_landed_is_adopted(h: Harness, caplog_agent) -> None:
    # The create reaches the store but its response is lost; the client's retry gets 409 path conflict.
    h.write("new.md", "v1")
    h.transport.after_once(_is_create, _lose_response)
    stats = await h.sync()
    assert stats.outcome == "synced"
    assert (await h.remote())["new.md"] == "v1"
    assert await h.versions("new.md") == 1  # nothing duplicated
    assert h.state().baseline["new.md"] == content_sha256("v1")
    assert h.engine.tally.conflicts == 0
    assert not logged(caplog_agent, messages.PATH_TAKEN)


async def test_retried_create_with_an_unnamed_blocker_settles_by_the_next_listing(
    h: Harness, caplog_agent
) -> None:
    # As above, but the 409 does not name the blocking memory: the send stays unsettled (sent_shas), so the
    # next listing recognises our own bytes, and an edit made in between is uploaded, not overwritten.
    h.write("new.md", "v1")
    h.transport.after_once(_is_create, _lose_response)
    h.transport.after_once(_is_create, _anonymous_blocker)
    await h.sync()
    assert (await h.remote())["new.md"] == "v1"
    assert h.state().sent_shas.get("new.md") == content_sha256("v1")
    h.write("new.md", "v2")
    await h.sync()
    assert (await h.remote())["new.md"] == "v2"
    assert h.read("new.md") == "v2"
    assert not logged(caplog_agent, messages.BOTH_CHANGED)
    assert h.engine.tally.conflicts == 0
    assert h.state().sent_shas == {}


# --- teardown (docs/sync-semantics.md#sync-flush-and-the-final-shutdown) -----------------------------------


async def test_final_shutdown_waives_the_window_and_uploads_everything(h: Harness) -> None:
    h.write("a.md", "final edit")
    h.write("new.md", "final new")
    (h.root / "b.md").unlink()
    out = await h.final()
    remote = await h.remote()
    assert remote["a.md"] == "final edit" and remote["new.md"] == "final new" and "b.md" not in remote
    assert out.complete
    assert out.stores[h.store_id] == {"uploaded": 2, "deleted": 1, "conflicts": 0, "refused": 0, "unsent": 0}


async def test_flush_is_push_only_and_leaves_a_changed_remote_alone(h: Harness, caplog_agent) -> None:
    h.write("a.md", "pushed by flush")
    h.write("b.md", "local b")
    await h.put("b.md", "remote b")  # changed remotely since the baseline
    await h.put("notes/c.md", "remote c")  # must not be pulled by a flush
    (h.root / "notes/d.md").unlink()  # must not be deleted by a flush
    out = await h.flush()
    remote = await h.remote()
    assert remote["a.md"] == "pushed by flush"
    assert remote["b.md"] == "remote b"
    assert remote["notes/d.md"] == "delta"
    assert h.read("notes/c.md") == "charlie"
    assert paths_of(logged(caplog_agent, messages.UPLOAD_LOST)) == ["/b.md"]
    assert out.stores[h.store_id]["conflicts"] == 1 and out.complete
    again = await h.flush()  # idempotent
    assert again.stores[h.store_id]["uploaded"] == 0
    assert await h.versions("a.md") == 2


async def test_flush_adopts_what_the_store_already_holds(h: Harness) -> None:
    await h.put("a.md", "same")
    h.write("a.md", "same")
    out = await h.flush()
    assert out.complete
    assert await h.versions("a.md") == 2  # no extra version
    assert h.state().baseline["a.md"] == content_sha256("same")


async def test_flush_cut_off_names_how_many_files_were_left_unsent(
    store_server, tmp_path, caplog_agent
) -> None:
    h = await make(store_server, tmp_path, files=FILES, flush_timeout=0.5)
    try:
        for i in range(5):
            h.write(f"slow{i}.md", f"slow {i}")

        async def stall(_: httpx.Request) -> None:
            await asyncio.sleep(5)

        for _ in range(5):
            h.transport.once(lambda r: r.method == "POST", stall)
        out = await h.flush()
        assert not out.complete
        assert out.stores[h.store_id]["unsent"] == 5
        assert logged(caplog_agent, messages.FLUSH_CUT_OFF.format(ms=500))
        assert logged(caplog_agent, messages.FLUSH_UNSENT.format(unsent=5, changed=5))
        # nothing is lost: the unsettled sends are remembered and the next sync pushes them
        assert set(h.state().sent_shas) == {f"slow{i}.md" for i in range(5)}
        await h.sync()
        assert {f"slow{i}.md" for i in range(5)} <= set(await h.remote())
    finally:
        await h.aclose()


async def test_final_sync_cut_off_is_logged_and_the_flush_still_runs(
    store_server, tmp_path, caplog_agent
) -> None:
    h = await make(store_server, tmp_path, files=FILES, flush_timeout=0.5)
    try:
        h.write("a.md", "must be saved")

        async def stall(_: httpx.Request) -> None:
            await asyncio.sleep(2)

        h.transport.once(lambda r: r.method == "GET", stall)  # the final sync's listing hangs
        out = await h.final()
        assert logged(caplog_agent, messages.FINAL_CUT_OFF.format(ms=500))
        assert out.complete
        assert (await h.remote())["a.md"] == "must be saved"
    finally:
        await h.aclose()
