"""The store server's versioned schema: an unversioned (pre-migration) SQLite file is adopted and upgraded
with its data intact, a fresh file starts at the latest version, and a database newer than the code is
refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memsync.server.storage import migrations
from memsync.server.storage.sqlite import SqliteDatabase

# The schema the server created before it was versioned (version 1's tables, no schema_version).
_UNVERSIONED = [
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    *migrations.SQLITE[0].statements,
]


def test_fresh_file_is_at_the_latest_version(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "s.db")
    try:
        assert db.schema_version == migrations.latest(migrations.SQLITE) == 5
        with db.read() as tx:
            assert tx.meta(migrations.SCHEMA_VERSION_KEY) == "5"
            assert tx.list_admin_keys() == []
    finally:
        db.close()


def test_unversioned_file_is_adopted_and_upgraded_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in _UNVERSIONED:
        conn.execute(statement)
    conn.execute("INSERT INTO meta (key, value) VALUES ('cursor_key', ?)", ("ab" * 32,))
    ts = "2026-01-01T00:00:00.000000Z"
    conn.execute(
        "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) "
        "VALUES ('memstore_old', 'Old', '', '{}', ?, ?)",
        (ts, ts),
    )
    conn.execute("INSERT INTO sessions (id, token_hash, created_at) VALUES ('sesn_old', 'h', ?)", (ts,))
    conn.commit()
    conn.close()

    db = SqliteDatabase(path)
    try:
        assert db.schema_version == 5
        assert db.cursor_key == bytes.fromhex("ab" * 32)  # cursors issued before the upgrade stay valid
        with db.read() as tx:
            store = tx.get_store("memstore_old")
            assert store is not None and store.name == "Old"
            assert (store.change_seq, store.change_id) == (0, "")
            session = tx.get_session("sesn_old")
            assert session is not None and session.expires_at is None and session.revoked_at is None
    finally:
        db.close()
    SqliteDatabase(path).close()  # a second start finds nothing to do


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SqliteDatabase(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = ?", (migrations.SCHEMA_VERSION_KEY,))
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="version 99, newer than this server's 5"):
        SqliteDatabase(path)
