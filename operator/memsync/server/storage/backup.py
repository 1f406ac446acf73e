"""Backup and restore of the SQLite store database.

``backup_sqlite`` uses SQLite's online backup API: a consistent copy while the server goes on serving and
writing. ``restore_sqlite`` checks the backup (a memsync store database, intact, a schema this code knows)
and moves it into place atomically; it refuses while the target has a write-ahead log with content (a server
still running on it, or one that did not stop cleanly), because SQLite would replay that log onto the
restored file.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from memsync.server.storage import migrations


class BackupError(Exception):
    pass


def backup_sqlite(source: Path, destination: Path) -> int:
    """Copy ``source`` to ``destination`` (which must not exist); the number of pages copied."""
    if not source.is_file():
        raise BackupError(f"{source} does not exist")
    try:  # created here, owner-only, so the copy is never readable by others even for a moment
        os.close(os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        raise BackupError(f"{destination} already exists; choose a new file") from None
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        _check(src, source)
        dest = sqlite3.connect(destination)
        try:
            src.backup(dest)
            pages = int(dest.execute("PRAGMA page_count").fetchone()[0])
        finally:
            dest.close()
    except BaseException:
        destination.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    return pages


def restore_sqlite(source: Path, target: Path, *, force: bool) -> None:
    if target.exists() and not force:
        raise BackupError(f"{target} exists; pass --force to replace it (stop the server first)")
    wal = target.with_name(target.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise BackupError(
            f"{wal} holds uncommitted log: the server is still running on {target} or did not stop cleanly; "
            "stop it (and start and stop it once if it crashed) before restoring"
        )
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        _check(src, source)
        fd, tmp_name = tempfile.mkstemp(prefix=".restore-", dir=target.parent)  # mode 0600
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            dest = sqlite3.connect(tmp)
            try:
                src.backup(dest)
            finally:
                dest.close()
            for stale in (wal, target.with_name(target.name + "-shm")):
                stale.unlink(missing_ok=True)
            tmp.replace(target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    finally:
        src.close()


def _check(conn: sqlite3.Connection, path: Path) -> None:
    try:
        ok = conn.execute("PRAGMA quick_check").fetchone()[0]
        row = conn.execute(
            "SELECT value FROM meta WHERE key = ?", (migrations.SCHEMA_VERSION_KEY,)
        ).fetchone()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a memsync store database: {exc}") from None
    if ok != "ok":
        raise BackupError(f"{path} is damaged: {ok}")
    version = int(row[0]) if row else 0
    if version > migrations.latest(migrations.SQLITE):
        raise BackupError(f"{path} has schema version {version}, newer than this memsync's")
