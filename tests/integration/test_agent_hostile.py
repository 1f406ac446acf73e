"""Hostile input: each case is refused or skipped with a warning, nothing outside the store folder is touched,
and nothing is lost. (Remote paths the server itself refuses — '..', NUL, absolute-in-segment — are covered
by the unit tests of ``remote_to_rel``.)"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memsync.agent import messages
from support.sync_harness import Harness, make_harness

FILES = {"a.md": "alpha", "dir/b.md": "bravo"}


def logged(caplog: pytest.LogCaptureFixture, fragment: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if fragment in r.getMessage()]


def snapshot(path: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


@pytest.fixture
def caplog_agent(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="memsync.agent")
    return caplog


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    (target / "sub").mkdir(parents=True)
    (target / "secret.txt").write_text("do not touch")
    (target / "sub" / "x.md").write_text("outside x")
    return target


@pytest.fixture
async def h(store_server, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = await make_harness(
        store_server.url, store_server.admin_key, tmp_path / "pod", files=FILES, delete_window=0
    )
    try:
        yield harness
    finally:
        await harness.aclose()


async def test_remote_paths_that_cannot_map_safely_are_skipped(
    store_server, tmp_path: Path, caplog_agent
) -> None:
    hostile = {
        "a\\..\\..\\escape.md": "backslashes",
        ".anthropic-memory-store": "fake marker",
        "ok.md": "fine",
    }
    h = await make_harness(
        store_server.url, store_server.admin_key, tmp_path / "pod", files=hostile, delete_window=0
    )
    try:
        assert h.local_files() == {"ok.md": "fine"}
        assert (h.root / ".anthropic-memory-store").read_text() == f"version 1\n{h.store_id}"
        assert logged(caplog_agent, messages.UNSAFE_REMOTE_PATH)
        assert logged(caplog_agent, "marker file's path")
        assert sorted(p.name for p in (tmp_path / "pod").iterdir()) == ["mnt", "var"]  # nothing escaped
        await h.sync(final=True)
        await h.final()
        assert await h.remote() == hostile  # never deleted, never overwritten
    finally:
        await h.aclose()


async def test_planted_symlinks_are_skipped_and_never_followed(
    h: Harness, outside: Path, caplog_agent
) -> None:
    before = snapshot(outside)
    os.symlink(outside / "secret.txt", h.root / "to-outside-file.md")
    os.symlink(outside, h.root / "to-outside-dir")
    os.symlink(h.root / "a.md", h.root / "to-inside-file.md")
    os.symlink(h.root / "dir", h.root / "to-inside-dir")
    (h.root / "a.md").unlink()
    os.symlink(outside / "secret.txt", h.root / "a.md")  # a memory's file replaced by a symlink
    await h.put("a.md", "remote change")  # must not be written through the link
    await h.sync()
    await h.sync(final=True)
    out = await h.final()
    assert snapshot(outside) == before
    remote = await h.remote()
    assert remote == {"a.md": "remote change", "dir/b.md": "bravo"}  # not deleted, nothing uploaded
    assert (h.root / "a.md").is_symlink()
    warned = {getattr(r, "path", "") for r in logged(caplog_agent, messages.NOT_REGULAR)}
    assert warned >= {
        "/to-outside-file.md",
        "/to-outside-dir",
        "/to-inside-file.md",
        "/to-inside-dir",
        "/a.md",
    }
    assert out.complete


async def test_directory_of_memories_replaced_by_a_symlink_is_not_taken_for_deletions(
    h: Harness, outside: Path
) -> None:
    shutil.rmtree(h.root / "dir")
    os.symlink(outside, h.root / "dir")
    before = snapshot(outside)
    await h.sync(final=True)
    assert (await h.remote())["dir/b.md"] == "bravo"
    assert snapshot(outside) == before


async def test_fifo_is_skipped_without_hanging(h: Harness, caplog_agent) -> None:
    os.mkfifo(h.root / "pipe.md")
    stats = await h.sync()
    assert stats.outcome == "synced"
    assert "pipe.md" not in await h.remote()
    assert [getattr(r, "kind", "") for r in logged(caplog_agent, messages.NOT_REGULAR)] == ["FIFO"]
    out = await h.flush()
    assert out.complete


async def test_non_utf8_content_and_names_and_big_files_are_refused_and_kept(
    h: Harness, caplog_agent
) -> None:
    h.write("latin1.md", "caf\xe9".encode("latin-1"))
    (h.root / b"bad-\xff-name.md".decode("utf-8", "surrogateescape")).write_text("odd name")
    h.write("big.md", "y" * 200_000)
    h.write("fine.md", "fine")
    await h.sync()
    out = await h.final()
    remote = await h.remote()
    assert remote["fine.md"] == "fine"
    assert not {"latin1.md", "big.md"} & set(remote)
    assert not [k for k in remote if k.startswith("bad-")]
    assert (h.root / "latin1.md").read_bytes() == "caf\xe9".encode("latin-1")
    assert len((h.root / "big.md").read_text()) == 200_000
    refused = {getattr(r, "path", "") for r in logged(caplog_agent, messages.LOCAL_REFUSED)}
    assert refused == {"/latin1.md", "/big.md"}
    bad_names = [getattr(r, "path", "") for r in logged(caplog_agent, messages.BAD_NAME)]
    assert len(bad_names) == 1 and bad_names[0].startswith("/bad-")  # reported as what it is, left alone
    assert not logged(caplog_agent, messages.NOT_REGULAR)
    assert not logged(caplog_agent, messages.REFUSED)  # the local checks do not speak for the server
    assert out.complete


async def test_paths_differing_only_by_case_both_sync(h: Harness) -> None:
    h.write("Case.md", "upper")
    h.write("case.md", "lower")
    await h.put("NOTES.md", "remote upper")
    await h.put("notes.md", "remote lower")
    await h.sync()
    remote = await h.remote()
    assert remote["Case.md"] == "upper" and remote["case.md"] == "lower"
    assert h.read("NOTES.md") == "remote upper" and h.read("notes.md") == "remote lower"


async def test_marker_replaced_by_a_symlink_leaves_the_folder_as_found(
    h: Harness, tmp_path: Path, caplog_agent
) -> None:
    real = tmp_path / "copied-marker"
    real.write_text(f"version 1\n{h.store_id}")  # even a symlink to a *correct* marker
    (h.root / ".anthropic-memory-store").unlink()
    os.symlink(real, h.root / ".anthropic-memory-store")
    h.write("a.md", "local edit")
    (h.root / "dir/b.md").unlink()
    await h.put("new.md", "remote new")
    stats = await h.sync(final=True)
    out = await h.final()
    assert stats.outcome == "left"
    assert logged(caplog_agent, messages.LEFT_AS_FOUND)
    assert await h.remote() == {**FILES, "new.md": "remote new"}  # no push, no delete
    assert h.read("new.md") is None  # no pull
    assert not out.complete and out.stores[h.store_id]["unsent"] == 1


async def test_store_folder_replaced_by_a_symlink_mid_run(h: Harness, outside: Path, caplog_agent) -> None:
    await h.sync()
    moved = h.root.parent / "moved-away"
    h.root.rename(moved)
    os.symlink(outside, h.root)
    before = snapshot(outside)
    await h.put("a.md", "remote change")
    stats = await h.sync(final=True)
    await h.final()
    assert stats.outcome == "left"
    assert logged(caplog_agent, messages.ROOT_REPLACED)
    assert snapshot(outside) == before
    assert await h.remote() == {**FILES, "a.md": "remote change"}
    assert snapshot(moved)["dir/b.md"] == b"bravo"


async def test_store_folder_replaced_by_another_directory_with_files(h: Harness, caplog_agent) -> None:
    moved = h.root.parent / "moved-away"
    h.root.rename(moved)
    shutil.copytree(moved, h.root)  # same content, even the marker - but not the folder memsync made
    (h.root / "a.md").unlink()
    stats = await h.sync(final=True)
    assert stats.outcome == "left"
    assert (await h.remote())["a.md"] == "alpha"


@pytest.mark.parametrize("outside_has_folder", [False, True])
async def test_parent_of_the_store_folder_replaced_by_a_symlink_never_redirects_recovery(
    h: Harness, tmp_path: Path, caplog_agent, outside_has_folder: bool
) -> None:
    # The folder's parent (here mnt/memory) is swapped for a symlink to a directory elsewhere, where the
    # store folder is missing (or an empty directory): that looks like a vanished folder to recover, but
    # recovering there would write the whole store outside the Pod's memory tree.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if outside_has_folder:
        (elsewhere / h.root.name).mkdir()
    parent = h.root.parent
    parent.rename(parent.with_name("memory-moved"))
    os.symlink(elsewhere, parent)
    before = snapshot(elsewhere)
    stats = await h.sync(final=True)
    assert stats.outcome == "left"
    assert logged(caplog_agent, messages.ROOT_REPLACED)
    assert snapshot(elsewhere) == before  # nothing written through the symlink
    assert await h.remote() == FILES  # and nothing deleted
    out = await h.final()
    assert snapshot(elsewhere) == before
    assert await h.remote() == FILES
    assert out.stores[h.store_id]["deleted"] == 0
