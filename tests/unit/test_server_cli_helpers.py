"""Pure helpers of ``memsync store``: the import plan, export path safety, ``--store`` specs."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from memsync.cli.store.admin import load_or_create_key_file, parse_store_spec
from memsync.cli.store.exporting import UnsafePathError, export_segments, write_below
from memsync.cli.store.importing import plan_import


def test_plan_import(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.md").write_text("deep")
    (tmp_path / "top.md").write_text("top")
    (tmp_path / "bin").write_bytes(b"\xff")
    (tmp_path / "big").write_text("x" * 102_401)
    (tmp_path / "exact").write_text("x" * 102_400)
    (tmp_path / "cafe\u0301").write_text("not NFC")
    (tmp_path / "link").symlink_to(tmp_path / "top.md")
    (tmp_path / ".anthropic-memory-store").write_text("version 1\nmemstore_x")
    (tmp_path / os.fsdecode(b"latin-\xe9.md")).write_text("a Latin-1 file name")
    (tmp_path / os.fsdecode(b"dir-\xe9")).mkdir()
    (tmp_path / os.fsdecode(b"dir-\xe9") / "inside.md").write_text("below a Latin-1 folder name")
    plan = plan_import(tmp_path)
    assert sorted(f.path for f in plan.files) == ["/a/b/c.md", "/exact", "/top.md"]
    skipped = dict(plan.skipped)
    assert skipped["bin"] == "not UTF-8 text"
    assert "102401 bytes" in skipped["big"]
    assert "NFC" in skipped["cafe\u0301"]
    assert "symbolic link" in skipped["link"]
    assert ".anthropic-memory-store" not in skipped
    # names that are not UTF-8 are listed printable (escaped), never as "not a regular file"
    assert skipped["latin-\\xe9.md"] == "the file name is not UTF-8 (a memory path is UTF-8 text)"
    assert skipped["dir-\\xe9/inside.md"] == skipped["latin-\\xe9.md"]


def test_export_segments() -> None:
    assert export_segments("/a/b.md") == ["a", "b.md"]
    for bad in ("relative", "/a/../b", "/a//b", "/" + "n" * 256, "/.anthropic-memory-store"):
        with pytest.raises(UnsafePathError):
            export_segments(bad)
    assert export_segments("/dir/.anthropic-memory-store") == ["dir", ".anthropic-memory-store"]


def test_write_below_never_follows_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "dir").symlink_to(outside)
    (root / "file.md").symlink_to(outside / "target.md")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            write_below(fd, ["dir", "x.md"], b"x")
        with pytest.raises(OSError):
            write_below(fd, ["file.md"], b"x")
        write_below(fd, ["new", "deep", "ok.md"], b"ok")
        write_below(fd, ["new", "deep", "ok.md"], b"replaced")
    finally:
        os.close(fd)
    assert list(outside.iterdir()) == []
    assert (root / "new" / "deep" / "ok.md").read_bytes() == b"replaced"
    assert not [p for p in (root / "new" / "deep").iterdir() if p.name.endswith(".tmp")]


def test_parse_store_spec() -> None:
    assert parse_store_spec("memstore_a") == ("memstore_a", "read_write")
    assert parse_store_spec("memstore_a:read_only") == ("memstore_a", "read_only")
    assert parse_store_spec("memstore_a:") == ("memstore_a", "read_write")
    for bad in ("store_a", "memstore_a:rw", "memstore_a:write_only"):
        with pytest.raises(click.BadParameter):
            parse_store_spec(bad)


def test_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "db.admin-key"
    key, created = load_or_create_key_file(path)
    assert created
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again, created_again = load_or_create_key_file(path)
    assert (again, created_again) == (key, False)
