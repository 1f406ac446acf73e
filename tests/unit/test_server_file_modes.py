"""The SQLite store database and its write-ahead log files are owner-only (0600), whatever the umask."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.server.storage.sqlite import SqliteDatabase, make_private


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022): files others could read unless the server asks for less."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.usefixtures("open_umask")
def test_a_new_database_and_its_wal_files_are_0600(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    db = SqliteDatabase(path)
    try:
        with db.write() as tx:  # a write after the migrations: the log and its index exist now
            tx.execute("INSERT INTO meta (key, value) VALUES ('probe', 'x')")
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == ["store.db", "store.db-shm", "store.db-wal"]
        assert {name: _mode(tmp_path / name) for name in names} == dict.fromkeys(names, 0o600)
    finally:
        db.close()


@pytest.mark.usefixtures("open_umask")
def test_an_existing_world_readable_database_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    sqlite3.connect(path).close()
    wal = tmp_path / "store.db-wal"
    wal.write_bytes(b"")
    path.chmod(0o644)
    wal.chmod(0o644)
    SqliteDatabase(path).close()
    assert _mode(path) == 0o600
    assert not wal.exists() or _mode(wal) == 0o600


def test_a_symlinked_database_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    target.chmod(0o644)
    (tmp_path / "store.db").symlink_to(target)
    with pytest.raises(OSError):
        SqliteDatabase(tmp_path / "store.db")
    assert _mode(target) == 0o644


def test_another_users_database_is_left_as_it_is_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)  # a volume shared through its group

    def not_the_owner(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", not_the_owner)  # as for a file another uid owns
    make_private(str(path))
    assert _mode(path) == 0o640
    [record] = [r for r in caplog.records if "belongs to another user" in r.getMessage()]
    assert record.levelname == "WARNING" and "0640" in record.getMessage()
    assert record.path == str(path)  # type: ignore[attr-defined]
