"""What the sync reports beyond the plain sync rules (docs/sync-semantics.md), against the real store server:
a synced file replaced by a folder of the same name (and the reverse), held deletes at session end, and
memories the agent can never write locally. Each must be counted and named, never silently dropped or
reported as a conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from memsync.agent import messages
from memsync.agent.conflicts import conflict_copy_name
from memsync.agent.localfs import StoreRoot
from support.sync_harness import Harness, make_harness

FILES = {"a.md": "alpha", "b.md": "bravo", "notes/c.md": "charlie", "notes/d.md": "delta"}


def logged(caplog: pytest.LogCaptureFixture, fragment: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if fragment in r.getMessage()]


@pytest.fixture
def caplog_agent(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="memsync.agent")
    return caplog


async def make(store_server, tmp_path: Path, **kw) -> Harness:
    return await make_harness(store_server.url, store_server.admin_key, tmp_path, **kw)


@contextlib.asynccontextmanager
async def harness(store_server, tmp_path: Path, **kw) -> AsyncIterator[Harness]:
    """A sync harness on a new store of the test's server, closed at the end."""
    h = await make(store_server, tmp_path, **kw)
    try:
        yield h
    finally:
        await h.aclose()


# --- a file replaced by a folder of the same name, and the reverse -------------------------------------


async def test_file_replaced_by_a_folder_deletes_the_memory_then_uploads_the_folder(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(store_server, tmp_path, files=FILES, delete_window=30) as h:
        (h.root / "a.md").unlink()
        h.write("a.md/inside.md", "now a folder")
        h.write("a.md/deeper/more.md", "and more")
        await h.sync()
        # The old memory waits for the delete window like any local deletion; the new files wait for it.
        assert (await h.remote())["a.md"] == "alpha"
        assert logged(caplog_agent, messages.WAITS_FOR_DELETE)
        h.clock.now += 31
        await h.sync()
        remote = await h.remote()
        assert "a.md" not in remote
        assert remote["a.md/inside.md"] == "now a folder" and remote["a.md/deeper/more.md"] == "and more"
        assert h.engine.tally.conflicts == 0
        assert not logged(caplog_agent, messages.PATH_TAKEN)


async def test_file_replaced_by_a_folder_at_session_end_is_saved_in_one_final_sync(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(store_server, tmp_path, files=FILES, delete_window=30) as h:
        (h.root / "b.md").unlink()
        h.write("b.md/inside.md", "folder at the end")
        out = await h.final()
        assert out.complete
        counts = out.stores[h.store_id]
        assert counts["conflicts"] == 0 and counts["deleted"] == 1 and counts["uploaded"] == 1
        remote = await h.remote()
        assert "b.md" not in remote and remote["b.md/inside.md"] == "folder at the end"


async def test_folder_replaced_by_a_file_deletes_the_memories_then_uploads_the_file(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(store_server, tmp_path, files=FILES, delete_window=30) as h:
        shutil.rmtree(h.root / "notes")
        h.write("notes", "now a file")
        await h.sync()
        assert (await h.remote())["notes/c.md"] == "charlie"  # the window runs
        assert logged(caplog_agent, messages.WAITS_FOR_DELETE)
        out = await h.final()
        assert out.complete
        assert out.stores[h.store_id]["conflicts"] == 0
        remote = await h.remote()
        assert remote == {"a.md": "alpha", "b.md": "bravo", "notes": "now a file"}
        assert h.read("notes") == "now a file"


async def test_file_replaced_by_a_folder_loses_to_a_remote_edit_of_the_file(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    """The store cannot hold both ``a.md`` and ``a.md/inside.md``: the remote edit wins, as in any conflict,
    and the local folder gives way instead of both sides waiting for each other for the whole session."""
    async with harness(store_server, tmp_path, files=FILES, delete_window=0) as h:
        (h.root / "a.md").unlink()
        h.write("a.md/inside.md", "now a folder")
        await h.put("a.md", "remote edit")
        await h.sync()
        assert h.local_files().get("a.md") == "remote edit"
        assert [r.path for r in logged(caplog_agent, messages.PATH_CLASH)] == ["/a.md/inside.md"]
        out = await h.final()
        assert out.complete and out.report.totals[h.store_id].conflicts >= 1
        remote = await h.remote()
        assert remote["a.md"] == "remote edit" and "a.md/inside.md" not in remote
        assert not logged(caplog_agent, messages.PATH_TAKEN)


async def test_folder_replaced_by_a_file_loses_to_a_remote_edit_below_it_and_keeps_a_copy(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(
        store_server,
        tmp_path,
        files=FILES,
        delete_window=0,
        conflict_policy="keepLocalCopy",
        session_id="sesn_keep",
    ) as h:
        h.clock.now = 1_796_065_588.0  # 2026-11-30T19:06:28Z
        shutil.rmtree(h.root / "notes")
        h.write("notes", "now a file")
        await h.put("notes/c.md", "remote edit")
        await h.sync()
        copy = "notes.conflict-sesn_keep-20261130T190628Z"
        local = h.local_files()
        assert local["notes/c.md"] == "remote edit" and local[copy] == "now a file"
        assert logged(caplog_agent, messages.PATH_CLASH) and logged(caplog_agent, messages.CONFLICT_COPY)
        out = await h.final()
        assert out.complete
        # notes/d.md was deleted locally and unchanged remotely: an ordinary deletion
        assert await h.remote() == {
            "a.md": "alpha",
            "b.md": "bravo",
            "notes/c.md": "remote edit",
            copy: "now a file",
        }
        assert not logged(caplog_agent, messages.PATH_TAKEN)


async def test_a_create_waiting_for_its_own_deletes_loses_to_a_remote_edit_in_its_way(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    """While the old memories' deletes wait (window or cap), one of them is changed remotely: it comes back,
    and the file in its way gives way, rather than the pull failing every pass."""
    async with harness(store_server, tmp_path, files=FILES, delete_window=30) as h:
        shutil.rmtree(h.root / "notes")
        h.write("notes", "now a file")
        await h.put("notes/c.md", "remote edit")
        await h.sync()
        assert h.local_files().get("notes/c.md") == "remote edit"
        assert [r.path for r in logged(caplog_agent, messages.PATH_CLASH)] == ["/notes"]
        assert not logged(caplog_agent, "memory not written to disk")
        out = await h.final()
        assert out.complete
        assert await h.remote() == {"a.md": "alpha", "b.md": "bravo", "notes/c.md": "remote edit"}


async def test_an_empty_folder_left_where_a_memory_is_pulled_gives_way(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    """A file replaced by a folder whose files then moved away leaves empty folders: they hold nothing, so
    the store's version of the path is written there instead of failing every pass."""
    async with harness(store_server, tmp_path, files=FILES, delete_window=0) as h:
        (h.root / "a.md").unlink()
        (h.root / "a.md" / "sub").mkdir(parents=True)
        (h.root / "b.md").unlink()
        (h.root / "b.md").mkdir()
        h.write("b.md/keep.md", "a file in the way")
        await h.put("a.md", "remote edit")
        await h.put("b.md", "remote b")
        await h.sync()
        assert h.local_files().get("a.md") == "remote edit"
        assert not logged(caplog_agent, "memory not written to disk")
        # a folder that holds a file is not removed: the file clashes and loses, as a conflict
        assert h.local_files().get("b.md") == "remote b"
        assert [r.path for r in logged(caplog_agent, messages.PATH_CLASH)] == ["/b.md/keep.md"]


async def test_a_file_made_unreadable_between_scan_and_upload_stops_nothing_else(
    store_server, tmp_path: Path, caplog_agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan read it; by the time its upload reads it, it is mode 000 (the OS error is injected: the tests
    run as root). The pass goes on with every other file, and the final flush counts it unsent."""
    h = await make(store_server, tmp_path, files=FILES, delete_window=0)
    real = StoreRoot.read_bytes

    def read_bytes(self: StoreRoot, rel: str) -> bytes:
        if rel == "a.md":
            raise PermissionError(errno.EACCES, "Permission denied", "a.md")
        return real(self, rel)

    try:
        h.write("a.md", "edit a")
        h.write("b.md", "edit b")
        await h.put("notes/c.md", "remote c")
        monkeypatch.setattr(StoreRoot, "read_bytes", read_bytes)
        await h.sync()
        remote = await h.remote()
        assert remote["b.md"] == "edit b" and remote["a.md"] == "alpha"
        assert h.local_files()["notes/c.md"] == "remote c"
        assert [r.path for r in logged(caplog_agent, messages.UNREADABLE)] == ["/a.md"]
        out = await h.final()
        assert not out.complete and out.stores[h.store_id]["unsent"] == 1
    finally:
        await h.aclose()


async def test_a_push_only_flush_counts_a_create_in_the_way_of_its_own_memory_as_unsent(
    store_server, tmp_path: Path
) -> None:
    async with harness(store_server, tmp_path, files=FILES, delete_window=30) as h:
        (h.root / "a.md").unlink()
        h.write("a.md/inside.md", "waits for a sync to delete a.md")
        out = await h.flush()
        assert not out.complete
        assert out.stores[h.store_id]["unsent"] == 1 and out.stores[h.store_id]["conflicts"] == 0
        assert (await h.remote())["a.md"] == "alpha"


async def test_with_deletes_disabled_a_blocked_create_is_refused_not_a_conflict(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(store_server, tmp_path, files=FILES, delete_window=0, deletions="disabled") as h:
        (h.root / "a.md").unlink()
        h.write("a.md/inside.md", "cannot be created while a.md stays")
        out = await h.final()
        counts = out.stores[h.store_id]
        assert counts["conflicts"] == 0
        assert counts["refused"] == 1 and counts["refused_paths"] == ["a.md/inside.md"]
        assert logged(caplog_agent, messages.BLOCKED_BY_KEPT_MEMORY)
        assert (await h.remote())["a.md"] == "alpha"


# --- held deletes at session end --------------------------------------------------------------------------


async def test_deletes_held_by_the_cap_at_session_end_are_reported(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    files = {f"f{i:02d}.md": str(i) for i in range(12)}
    async with harness(store_server, tmp_path, files=files, delete_window=0) as h:
        for rel in files:
            (h.root / rel).unlink()
        h.write("keep.md", "so the folder is not taken for a wipe")
        out = await h.final()
        counts = out.stores[h.store_id]
        assert counts["deleted"] == 8 and counts["held_deletes"] == 4
        assert counts["held_delete_paths"] == ["f08.md", "f09.md", "f10.md", "f11.md"]
        assert len(await h.remote()) == 5  # those four stay in the store, and the report says so
        assert logged(caplog_agent, messages.HELD_AT_END.format(held=4))
        assert out.report.totals[h.store_id].held_deletes == 4


# --- memories the agent can never write locally -----------------------------------------------------------


async def test_memories_that_cannot_be_local_files_are_counted_as_refused(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    long_segment = "x" * 300 + ".md"
    hostile = {
        "a\\b.md": "backslash",
        ".anthropic-memory-store": "fake marker",
        f"dir/{long_segment}": "a segment over 255 bytes",
        "ok.md": "fine",
    }
    async with harness(store_server, tmp_path, files=hostile, delete_window=0) as h:
        assert h.local_files() == {"ok.md": "fine"}
        await h.sync()
        expected = sorted([".anthropic-memory-store", "a\\b.md", f"dir/{long_segment}"])
        assert h.engine.tally.refused == 3 and h.engine.tally.refused_paths == expected
        gauge = h.agent.metrics.registry.get_sample_value("memsync_refused_paths", {"store": h.store_id})
        assert gauge == 3
        warned = {getattr(r, "remote_path", "") for r in logged(caplog_agent, messages.UNSAFE_REMOTE_PATH)}
        assert warned == {"/a\\b.md", f"/dir/{long_segment}"}
        out = await h.final()
        assert out.complete
        assert out.stores[h.store_id]["refused"] == 3
        assert out.report.totals[h.store_id].refused_paths == expected
        assert await h.remote() == hostile  # never deleted, never overwritten


# --- conflictPolicy: keepLocalCopy ------------------------------------------------------------------------


def test_conflict_copy_names() -> None:
    when = "20261130T190628Z"
    assert conflict_copy_name("notes/todo.md", "sesn_1", when) == f"notes/todo.conflict-sesn_1-{when}.md"
    assert conflict_copy_name("README", "sesn_1", when) == f"README.conflict-sesn_1-{when}"
    assert conflict_copy_name(".env", "sesn_1", when, 2) == f".env.conflict-sesn_1-{when}-2"
    assert conflict_copy_name("a.tar.gz", "s", when) == f"a.tar.conflict-s-{when}.gz"


async def test_store_wins_by_default_and_no_copy_is_written(store_server, tmp_path: Path) -> None:
    async with harness(store_server, tmp_path, files=FILES, delete_window=0, session_id="sesn_default") as h:
        h.write("a.md", "local edit")
        await h.put("a.md", "remote edit")
        await h.sync()
        assert h.local_files()["a.md"] == "remote edit"
        assert not [rel for rel in h.local_files() if ".conflict-" in rel]


async def test_keep_local_copy_writes_the_losing_edit_beside_the_file_and_syncs_it(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(
        store_server,
        tmp_path,
        files=FILES,
        delete_window=0,
        conflict_policy="keepLocalCopy",
        session_id="sesn_keep",
    ) as h:
        h.clock.now = 1_796_065_588.0  # 2026-11-30T19:06:28Z
        h.write("notes/c.md", "the agent's edit")
        await h.put("notes/c.md", "someone else's edit")
        await h.sync()
        copy = "notes/c.conflict-sesn_keep-20261130T190628Z.md"
        local = h.local_files()
        assert local["notes/c.md"] == "someone else's edit"  # the store wins, as in every conflict
        assert local[copy] == "the agent's edit"  # and the agent's edit survives beside it
        assert logged(caplog_agent, messages.BOTH_CHANGED) and logged(caplog_agent, messages.CONFLICT_COPY)
        out = await h.final()
        assert out.complete
        remote = await h.remote()
        assert remote[copy] == "the agent's edit" and remote["notes/c.md"] == "someone else's edit"
        assert out.stores[h.store_id]["conflicts"] == 0 and out.report.totals[h.store_id].conflicts == 1


async def test_keep_local_copy_refuses_a_copy_name_that_cannot_be_a_memory_and_keeps_the_edit(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    name = "n" * 240 + ".md"  # the copy's name would pass 255 bytes
    async with harness(
        store_server,
        tmp_path,
        files={name: "base", "ok.md": "ok"},
        delete_window=0,
        conflict_policy="keepLocalCopy",
        session_id="sesn_keep",
    ) as h:
        h.write(name, "the agent's edit")
        await h.put(name, "someone else's edit")
        await h.sync()
        assert h.local_files()[name] == "the agent's edit"  # not overwritten: never lost
        assert logged(caplog_agent, messages.CONFLICT_COPY_REFUSED)
        assert h.engine.tally.refused == 1 and h.engine.tally.refused_paths == [name]


async def test_keep_local_copy_in_a_push_only_flush_saves_the_losing_edit_once(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    async with harness(
        store_server,
        tmp_path,
        files=FILES,
        delete_window=0,
        conflict_policy="keepLocalCopy",
        session_id="sesn_flush",
    ) as h:
        h.write("a.md", "edited just before the end")
        await h.put("a.md", "changed in the store meanwhile")
        flushed = await h.flush()  # the preStop flush: its conditional update loses (409)
        assert flushed.complete and flushed.stores[h.store_id]["conflicts"] == 1
        assert logged(caplog_agent, messages.UPLOAD_LOST)
        copies = {rel: c for rel, c in (await h.remote()).items() if rel.startswith("a.conflict-sesn_flush-")}
        assert list(copies.values()) == ["edited just before the end"]
        final = await h.final()  # the final sync sees the conflict again: the copy is reused, not doubled
        assert final.complete
        remote = await h.remote()
        assert remote["a.md"] == "changed in the store meanwhile"
        assert [c for rel, c in remote.items() if ".conflict-" in rel] == ["edited just before the end"]
        assert [rel for rel in h.local_files() if ".conflict-" in rel] == list(copies)


async def test_a_create_refused_for_a_clashing_memory_created_meanwhile_is_a_reported_conflict(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    """Another writer creates a memory below the new file's path between the listing and the create (the
    other session of a shared store turned the path into a folder): the store wins, and the final pass,
    after which no sync follows, reports the lost file as that conflict."""
    h = await make(store_server, tmp_path, files=FILES, delete_window=0)
    try:
        h.write("new.md", "a new file")

        async def folder_first(request: httpx.Request) -> None:
            await h.put("new.md/inside.md", "the other session's folder")

        h.transport.once(lambda r: r.method == "POST" and b'"/new.md"' in r.content, folder_first)
        out = await h.final()
        assert [r.path for r in logged(caplog_agent, messages.PATH_CLASH)] == ["/new.md"]
        assert not logged(caplog_agent, messages.PATH_TAKEN)
        assert out.report.totals[h.store_id].conflicts == 1
        assert (await h.remote())["new.md/inside.md"] == "the other session's folder"
    finally:
        await h.aclose()


async def test_deletes_held_by_a_final_sync_cut_off_mid_transfer_are_still_reported(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    """The final sync holds deletes back by the cap, then its budget runs out while its transfers hang (a slow
    store): the held deletes are reported all the same (the push-only flush that follows never deletes)."""
    files = {f"f{i:02d}.md": f"file {i}" for i in range(12)}
    h = await make(
        store_server, tmp_path, files={**files, "kept.md": "kept"}, delete_window=0, flush_timeout=2
    )
    try:
        for rel in files:
            (h.root / rel).unlink()

        async def hang(_: httpx.Request) -> None:
            await asyncio.sleep(3600)

        h.transport.once(lambda r: r.method == "DELETE", hang)
        out = await h.final()
        assert logged(caplog_agent, messages.FINAL_CUT_OFF.split("{")[0])
        counts = out.report.stores[h.store_id]
        assert counts.held_deletes == 4 and len(counts.held_delete_paths) == 4
        assert logged(caplog_agent, messages.HELD_AT_END.split("{")[0])
    finally:
        await h.aclose()
