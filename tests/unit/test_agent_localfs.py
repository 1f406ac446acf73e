"""The safe filesystem layer, the scan and its hash cache, and the persisted state (real files, tmp_path)."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.agent import renames
from memsync.agent.localfs import (
    NotRegularFile,
    RootMissing,
    RootReplaced,
    dir_identity,
    make_root,
    open_root,
    recreate_root,
)
from memsync.agent.relpath import UnsafePath, path_problem, remote_to_rel
from memsync.agent.scan import HashCache, scan
from memsync.agent.state import LockTimeout, StoreState, load_state, save_state, store_lock
from memsync.api.constants import MARKER_FILENAME
from memsync.api.hashing import sha256_bytes

SID = "memstore_unit"


@pytest.fixture
def root(tmp_path: Path):
    r, _ = make_root(tmp_path / "mnt" / "store")
    r.write_marker(SID)
    yield r
    r.close()


# --- mapping remote paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/../etc/passwd",
        "/a/../../x",
        "relative",
        "//abs",
        "/a\x00b",
        "/a\\..\\b",
        "/.anthropic-memory-store",
        "/a/./b",
        "/a/",
        "/x/.fs-0123456789abcdef.tmp",
        "/" + "n" * 256,
        "/a\u202eb",
        "/caf\u0065\u0301",
    ],
)
def test_hostile_remote_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePath):
        remote_to_rel(path)


@pytest.mark.parametrize(
    "path", ["/a.md", "/notes/todo.md", "/Notes/Todo.md", "/ünï/cödé.md", "/a b/c-d_e.md"]
)
def test_ordinary_paths_map(path: str) -> None:
    assert remote_to_rel(path) == path[1:]
    assert path_problem(path[1:]) is None


# --- writes, reads, removal ---------------------------------------------------------------------------------


def test_atomic_write_creates_dirs_0700_and_files_0600(root, tmp_path: Path) -> None:
    root.write_bytes("a/b/c.md", b"hello")
    base = tmp_path / "mnt" / "store"
    assert (base / "a/b/c.md").read_bytes() == b"hello"
    assert (base / "a").stat().st_mode & 0o777 == 0o700
    assert (base / "a/b/c.md").stat().st_mode & 0o777 == 0o600
    assert not [p for p in base.rglob(".fs-*")]  # no temp file left behind


def test_write_through_a_symlinked_directory_is_refused(root, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, tmp_path / "mnt/store/linked")
    with pytest.raises(OSError):
        root.write_bytes("linked/x.md", b"escape")
    assert list(outside.iterdir()) == []


def test_write_over_a_symlinked_file_is_refused(root, tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("keep")
    os.symlink(target, tmp_path / "mnt/store/f.md")
    with pytest.raises(NotRegularFile):
        root.write_bytes("f.md", b"overwrite")
    assert target.read_text() == "keep"
    assert (tmp_path / "mnt/store/f.md").is_symlink()


def test_reads_never_follow_symlinks(root, tmp_path: Path) -> None:
    target = tmp_path / "secret.txt"
    target.write_text("secret")
    os.symlink(target, tmp_path / "mnt/store/f.md")
    with pytest.raises(NotRegularFile):
        root.read_bytes("f.md")
    with pytest.raises(NotRegularFile):
        root.sha_of("f.md")


def test_remove_if_rehashes_first(root) -> None:
    root.write_bytes("d/x.md", b"one")
    assert root.remove_if("d/x.md", sha256_bytes(b"other")) is False
    assert root.read_bytes("d/x.md") == b"one"
    assert root.remove_if("d/x.md", sha256_bytes(b"one")) is True
    assert not root.exists("d/x.md") and not root.exists("d")  # empty parent pruned


@pytest.mark.parametrize("how", ["in_place", "replaced_by_rename"])
def test_remove_if_never_unlinks_an_edit_landing_right_after_its_hash(
    root, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root.write_bytes("d/x.md", b"one")
    path = tmp_path / "mnt/store/d/x.md"
    real_hash_at = root.hash_at
    calls = []

    def hash_then_edit(dir_fd: int, name: str):  # the agent edits the file right after memsync hashed it
        result = real_hash_at(dir_fd, name)
        calls.append(name)
        if len(calls) == 1:
            if how == "in_place":
                path.write_bytes(b"edited")
            else:
                (path.parent / "editor.swp").write_bytes(b"edited")
                (path.parent / "editor.swp").replace(path)
        return result

    monkeypatch.setattr(root, "hash_at", hash_then_edit)
    assert root.remove_if("d/x.md", sha256_bytes(b"one")) is False
    assert path.read_bytes() == b"edited"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.md"]  # no temp file left behind


def test_remove_if_keeps_both_when_edited_twice_during_the_removal(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root.write_bytes("x.md", b"one")
    path = tmp_path / "mnt/store/x.md"
    real_hash_at = root.hash_at
    calls = []

    def hash_then_edit(dir_fd: int, name: str):
        result = real_hash_at(dir_fd, name)
        calls.append(name)
        if len(calls) == 1:
            path.write_bytes(b"first edit")  # lands in the file about to be moved aside
        elif len(calls) == 2:
            path.write_bytes(b"second edit")  # a new file at the name, created after the move
        return result

    monkeypatch.setattr(root, "hash_at", hash_then_edit)
    assert root.remove_if("x.md", sha256_bytes(b"one")) is False
    assert path.read_bytes() == b"second edit"
    kept = [p for p in path.parent.iterdir() if p.name.startswith("x.md.memsync-kept-")]
    assert [p.read_bytes() for p in kept] == [b"first edit"]


# --- compare-and-swap writes (pulls) --------------------------------------------------------------------


def _before_first(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]) -> None:
    """Run ``action`` (the agent touching the file) right before the first call of ``renames.<name>``: after
    memsync hashed the file, before it swaps the new content in."""
    real = getattr(renames, name)
    calls: list[int] = []

    def wrapped(*args: object) -> None:
        if not calls:
            action()
        calls.append(1)
        real(*args)

    monkeypatch.setattr(renames, name, wrapped)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_replace_if_writes_only_over_the_expected_content(root, tmp_path: Path) -> None:
    folder = tmp_path / "mnt/store"
    root.write_bytes("x.md", b"one")
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"other")) is False
    assert root.read_bytes("x.md") == b"one"
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"one")) is True
    assert root.read_bytes("x.md") == b"pulled"
    assert root.replace_if("x.md", b"again", None) is False  # None: only where nothing is
    assert root.replace_if("d/new.md", b"new", None) is True
    assert root.read_bytes("d/new.md") == b"new"
    assert _names(folder) == [MARKER_FILENAME, "d", "x.md"]  # no temp file left behind


def test_replace_if_never_resurrects_a_file_deleted_after_its_hash(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mnt/store/x.md"
    root.write_bytes("x.md", b"one")
    _before_first(monkeypatch, "exchange", path.unlink)
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"one")) is False
    assert not path.exists()
    assert _names(path.parent) == [MARKER_FILENAME]


@pytest.mark.parametrize("how", ["in_place", "replaced_by_rename", "replaced_by_directory"])
def test_replace_if_never_clobbers_an_edit_landing_after_its_hash(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    path = tmp_path / "mnt/store/x.md"
    root.write_bytes("x.md", b"one")

    def edit() -> None:
        if how == "in_place":
            path.write_bytes(b"edited")
        elif how == "replaced_by_rename":
            (path.parent / "editor.swp").write_bytes(b"edited")
            (path.parent / "editor.swp").replace(path)
        else:
            path.unlink()
            path.mkdir()
            (path / "inner.md").write_bytes(b"edited")

    _before_first(monkeypatch, "exchange", edit)
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"one")) is False
    edited = path / "inner.md" if how == "replaced_by_directory" else path
    assert edited.read_bytes() == b"edited"
    assert _names(path.parent) == [MARKER_FILENAME, "x.md"]


def test_replace_if_never_clobbers_a_file_created_after_its_check(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mnt/store/x.md"
    _before_first(monkeypatch, "rename_noreplace", lambda: path.write_bytes(b"created"))
    assert root.replace_if("x.md", b"pulled", None) is False
    assert path.read_bytes() == b"created"
    assert _names(path.parent) == [MARKER_FILENAME, "x.md"]


def _around_first_exchange(
    monkeypatch: pytest.MonkeyPatch, before: Callable[[], None], after: Callable[[], None]
) -> None:
    """The agent acts right before memsync's first swap (after its hash) and right after it (before the
    swap back)."""
    real = renames.exchange
    calls: list[int] = []

    def exchange(dir_fd: int, a: str, b: str) -> None:
        calls.append(1)
        if len(calls) == 1:
            before()
        real(dir_fd, a, b)
        if len(calls) == 1:
            after()

    monkeypatch.setattr(renames, "exchange", exchange)


def test_replace_if_keeps_an_edit_made_to_the_new_file_while_it_is_swapped_back(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mnt/store/x.md"
    root.write_bytes("x.md", b"one")
    # in place after the hash (the swap takes it out), then into the pulled file before it is swapped back
    _around_first_exchange(
        monkeypatch, lambda: path.write_bytes(b"first edit"), lambda: path.write_bytes(b"second edit")
    )
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"one")) is False
    assert path.read_bytes() == b"first edit"
    kept = [p for p in path.parent.iterdir() if p.name.startswith("x.md.memsync-kept-")]
    assert [p.read_bytes() for p in kept] == [b"second edit"]


def test_replace_if_puts_an_edit_back_when_the_new_file_is_deleted_during_the_swap(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mnt/store/x.md"
    root.write_bytes("x.md", b"one")
    # in place after the hash (the swap takes it out); then the pulled file is deleted before the swap back
    _around_first_exchange(monkeypatch, lambda: path.write_bytes(b"edited"), path.unlink)
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"one")) is False
    assert path.read_bytes() == b"edited"
    assert _names(path.parent) == [MARKER_FILENAME, "x.md"]


def test_replace_if_falls_back_to_rehash_and_rename_without_renameat2(
    root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(*_: object) -> None:
        raise renames.Unsupported(errno.ENOSYS, "renameat2 is not available")

    monkeypatch.setattr(renames, "_renameat2", unsupported)
    root.write_bytes("x.md", b"one")
    assert root.replace_if("x.md", b"pulled", sha256_bytes(b"one")) is True
    assert root.replace_if("y.md", b"new", None) is True
    assert root.replace_if("x.md", b"other", sha256_bytes(b"one")) is False
    assert [root.read_bytes(r) for r in ("x.md", "y.md")] == [b"pulled", b"new"]
    assert _names(tmp_path / "mnt/store") == [MARKER_FILENAME, "x.md", "y.md"]


def test_marker_check(root, tmp_path: Path) -> None:
    assert root.marker_ok(SID)
    assert not root.marker_ok("memstore_other")
    marker = tmp_path / "mnt/store/.anthropic-memory-store"
    real = tmp_path / "real-marker"
    real.write_text(f"version 1\n{SID}")
    marker.unlink()
    os.symlink(real, marker)  # a symlink to a correct marker is still a bad marker
    assert not root.marker_ok(SID)
    assert not scan(root, SID, HashCache()).marker_ok


def test_make_root_refuses_anything_there(tmp_path: Path) -> None:
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    with pytest.raises(FileExistsError):
        make_root(tmp_path / "dangling")


def test_root_replaced_by_symlink_or_another_directory(root, tmp_path: Path) -> None:
    identity = root.identity
    path = tmp_path / "mnt/store"
    path.rename(tmp_path / "moved")
    with pytest.raises(RootMissing):
        open_root(path, identity)
    other = tmp_path / "other"
    other.mkdir()
    os.symlink(other, path)
    with pytest.raises(RootReplaced):
        open_root(path, identity)
    path.unlink()
    path.mkdir()
    with pytest.raises(RootReplaced):
        open_root(path, identity)


def test_recreate_root_only_inside_the_recorded_parent(tmp_path: Path) -> None:
    path = tmp_path / "mnt" / "store"
    made, _ = make_root(path)
    made.close()
    parent = dir_identity(path.parent)
    assert parent is not None
    path.rmdir()
    with recreate_root(path, parent) as again:  # gone: re-created, 0700, in the same parent
        assert again.identity == dir_identity(path)
    assert (path.stat().st_mode & 0o777) == 0o700
    with recreate_root(path, parent):  # an (empty) directory there is reopened
        pass
    path.rmdir()
    os.symlink(tmp_path, path)  # a symlink at the folder's own name is never followed
    with pytest.raises(RootReplaced):
        recreate_root(path, parent)
    path.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.parent.rename(tmp_path / "mnt-moved")
    os.symlink(elsewhere, tmp_path / "mnt")  # the parent swapped for a symlink to another directory
    with pytest.raises(RootReplaced):
        recreate_root(path, parent)
    assert list(elsewhere.iterdir()) == []
    (tmp_path / "mnt").unlink()
    with pytest.raises(RootReplaced):  # the parent is gone altogether
        recreate_root(path, parent)


# --- the scan -----------------------------------------------------------------------------------------------


def test_scan_skips_symlinks_fifos_and_marker_and_never_descends_links(root, tmp_path: Path) -> None:
    base = tmp_path / "mnt/store"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.md").write_text("outside")
    root.write_bytes("ok.md", b"fine")
    os.symlink(outside / "o.md", base / "filelink.md")
    os.symlink(outside, base / "dirlink")
    os.symlink(base / "ok.md", base / "inside-link.md")
    os.mkfifo(base / "pipe")
    (base / "bad\\name.md").write_text("x")
    result = scan(root, SID, HashCache())
    assert result.files == {"ok.md": sha256_bytes(b"fine")}
    assert set(result.blocked) == {"filelink.md", "dirlink", "inside-link.md", "pipe", "bad\\name.md"}
    assert result.blocked["pipe"] == "FIFO" and result.blocked["dirlink"] == "symlink"
    assert result.marker_ok


def test_scan_cache_hashes_nothing_when_nothing_changed(root, tmp_path: Path) -> None:
    for i in range(20):
        root.write_bytes(f"d/f{i}.md", f"file {i}".encode())
    cache = HashCache()
    future = time.time_ns() + 10_000_000_000  # pretend the files are old enough
    first = scan(root, SID, cache, now_ns=future)
    assert first.hashed == 20
    second = scan(root, SID, cache, now_ns=future)
    assert second.hashed == 0 and second.files == first.files
    root.write_bytes("d/f3.md", b"changed")
    third = scan(root, SID, cache, now_ns=time.time_ns() + 10_000_000_000)
    assert third.hashed == 1 and third.files["d/f3.md"] == sha256_bytes(b"changed")


def test_scan_always_rehashes_files_changed_within_two_seconds(root) -> None:
    root.write_bytes("f.md", b"x")
    cache = HashCache()
    now = time.time_ns()
    scan(root, SID, cache, now_ns=now)
    assert scan(root, SID, cache, now_ns=now + 1_000_000_000).hashed == 1  # 1 s later: still recent
    assert scan(root, SID, cache, now_ns=now + 5_000_000_000).hashed == 0


def test_scan_detects_same_size_same_mtime_edit_by_inode_or_ctime(root, tmp_path: Path) -> None:
    root.write_bytes("f.md", b"aaaa")
    path = tmp_path / "mnt/store/f.md"
    st = path.stat()
    cache = HashCache()
    later = time.time_ns() + 10_000_000_000
    scan(root, SID, cache, now_ns=later)
    root.write_bytes("f.md", b"bbbb")  # atomic replace: new inode
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert scan(root, SID, cache, now_ns=later).files["f.md"] == sha256_bytes(b"bbbb")


# --- state --------------------------------------------------------------------------------------------------


def test_state_round_trip(tmp_path: Path) -> None:
    state = StoreState(
        memory_store_id=SID,
        baseline={"a.md": "a" * 64},
        remote_ids={"a.md": "mem_1"},
        refused_shas={"b.md": "b" * 64},
        pending_deletes={"c.md": 123.5},
        sent_shas={"d.md": "d" * 64},
        root_dev=1,
        root_ino=2,
    )
    save_state(tmp_path / "state", state)
    loaded = load_state(tmp_path / "state", SID)
    assert loaded == state
    assert ((tmp_path / "state" / f"store-{SID}.json").stat().st_mode & 0o777) == 0o600
    assert load_state(tmp_path / "state", "memstore_none") is None


async def test_store_lock_excludes_a_second_holder(tmp_path: Path) -> None:
    async with store_lock(tmp_path, SID, wait_s=None):
        with pytest.raises(LockTimeout):
            async with store_lock(tmp_path, SID, wait_s=0.1):
                pass
    async with store_lock(tmp_path, SID, wait_s=0.1):  # released
        pass

    order: list[str] = []

    async def holder() -> None:
        async with store_lock(tmp_path, SID, wait_s=None):
            order.append("first in")
            await asyncio.sleep(0.2)
            order.append("first out")

    async def waiter() -> None:
        await asyncio.sleep(0.05)
        async with store_lock(tmp_path, SID, wait_s=5):
            order.append("second in")

    await asyncio.gather(holder(), waiter())
    assert order == ["first in", "first out", "second in"]
