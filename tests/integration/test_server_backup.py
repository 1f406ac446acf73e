"""``memsync store backup`` / ``restore``: an online copy of the SQLite database while the server serves, a
restore that refuses to clobber a live database, and PostgreSQL pointed at pg_dump."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import RunningStoreServer, StoreApi, launch_store_server
from support.server_process import run_cli


def _memsync(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("store", *args)


def test_online_backup_and_restore(fresh_store_server: RunningStoreServer, tmp_path: Path) -> None:
    server = fresh_store_server
    api = StoreApi(server)
    try:
        store = api.new_store("Backed up")
        for i in range(30):
            api.create(store, f"/n/{i:02d}", f"note {i}")
        copy = tmp_path / "backup.db"
        made = _memsync("backup", str(copy), "--db", str(server.db_path))  # the server keeps running
        assert made.returncode == 0, made.stderr
        assert (copy.stat().st_mode & 0o777) == 0o600
        api.create(store, "/after-backup", "not in the backup")  # the live server still writes
        assert _memsync("backup", str(copy), "--db", str(server.db_path)).returncode == 1  # never overwrites

        # restoring over the live database is refused (its write-ahead log has content)
        live = _memsync("restore", str(copy), "--db", str(server.db_path), "--force")
        assert live.returncode == 1 and "still running" in live.stderr
    finally:
        api.close()

    target = tmp_path / "restored" / "store.db"
    target.parent.mkdir()
    assert _memsync("restore", str(copy), "--db", str(target)).returncode == 0
    assert _memsync("restore", str(copy), "--db", str(target)).returncode == 1  # exists: needs --force
    restored = launch_store_server(target.parent, admin_key=server.admin_key)
    try:
        again = StoreApi(restored)
        try:
            assert again.paths(store) == [f"/n/{i:02d}" for i in range(30)]
        finally:
            again.close()
    finally:
        restored.stop()

    not_a_db = tmp_path / "junk.db"
    not_a_db.write_bytes(b"junk" * 1000)
    bad = _memsync("restore", str(not_a_db), "--db", str(tmp_path / "x.db"))
    assert bad.returncode == 1 and "not a memsync store database" in bad.stderr


def test_postgresql_is_pointed_at_pg_dump(tmp_path: Path) -> None:
    result = _memsync("backup", str(tmp_path / "x"), "--db", "postgresql://u@127.0.0.1:1/db")
    assert result.returncode == 2 and "pg_dump" in result.stderr
