"""SQLite: the probe's change marker is remembered between commits, read from the WAL-index header.

What must hold: any commit, from any connection of any process, changes the header's state; reads do not;
a remembered marker is answered only under the state it was read under; a store's marker read through
``read_now`` always equals what a statement reads now, whatever commits came between; and where there is no
WAL-index to read (in-memory database, no or symlinked ``-shm``) nothing is remembered.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.server.storage.sqlite import RememberingTx, SqliteDatabase
from memsync.server.storage.sqlite_changes import MIN_SHM_BYTES, MarkerMemory, WalIndex
from support.store_service import new_store, write_memory


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteDatabase]:
    database = SqliteDatabase(tmp_path / "s.db")
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def index(db: SqliteDatabase) -> Iterator[WalIndex]:
    """The database's WAL-index header, mapped as the server maps it."""
    opened = WalIndex.open(db.path)
    assert opened is not None
    try:
        yield opened
    finally:
        opened.close()


def probe(db: SqliteDatabase, store_id: str) -> tuple[str, int] | None:
    """The marker as the event loop's read answers it (remembered or read)."""
    with db.read_now() as tx:
        return tx.store_change(store_id)


def statement(path: Path, store_id: str) -> tuple[str, int] | None:
    """The marker as a connection that remembers nothing reads it now."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT change_id, change_seq FROM stores WHERE id = ?", (store_id,)).fetchone()
    finally:
        conn.close()
    return None if row is None else (str(row[0]), int(row[1]))


def statements_run(db: SqliteDatabase, store_id: str) -> list[str]:
    """The SQL the event loop's connection runs for one probe (that connection must exist already)."""
    seen: list[str] = []
    conn: sqlite3.Connection = db._local.now
    conn.set_trace_callback(seen.append)
    try:
        probe(db, store_id)
    finally:
        conn.set_trace_callback(None)
    return [sql for sql in seen if "FROM stores" in sql]


# --- the header ------------------------------------------------------------------------------------------


def test_the_header_changes_with_each_commit_of_this_process_and_not_with_reads(
    db: SqliteDatabase, index: WalIndex, tmp_path: Path
) -> None:
    store = new_store(db)
    seen = {index.state()}
    assert None not in seen
    for n in range(5):
        probe(db, store)
        statement(tmp_path / "s.db", store)
        assert index.state() in seen  # reads leave it be
        write_memory(db, store, f"/notes/{n}.md")
        state = index.state()
        assert state is not None and state not in seen
        seen.add(state)


def test_a_commit_by_another_process_changes_the_header(
    db: SqliteDatabase, index: WalIndex, tmp_path: Path
) -> None:
    store = new_store(db)
    before = index.state()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
            "c.execute('UPDATE stores SET change_seq = change_seq + 1 WHERE id = ?', (sys.argv[2],));"
            "c.commit(); c.close()",
            str(tmp_path / "s.db"),
            store,
        ],
        check=True,
        timeout=60,
    )
    after = index.state()
    assert before is not None and after is not None and after != before


def test_the_header_after_a_checkpoint_restarts_the_log_is_new(
    db: SqliteDatabase, index: WalIndex, tmp_path: Path
) -> None:
    store = new_store(db)
    seen = {index.state()}
    for n in range(3):
        with db.write() as tx:
            tx.store_changed(store, f"c{n}")
        seen.add(index.state())
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        seen.add(index.state())  # a checkpoint changes nothing a reader sees; its state may be new or not
        conn.execute("UPDATE stores SET change_seq = change_seq + 1 WHERE id = ?", (store,))
        conn.commit()  # the first commit after the restart: a new log, new salts
    finally:
        conn.close()
    state = index.state()
    assert state is not None and state not in seen


def test_no_index_for_a_missing_short_or_symlinked_shm(tmp_path: Path) -> None:
    assert WalIndex.open(str(tmp_path / "absent.db")) is None
    (tmp_path / "short.db-shm").write_bytes(b"\0" * (MIN_SHM_BYTES - 1))
    assert WalIndex.open(str(tmp_path / "short.db")) is None
    (tmp_path / "elsewhere").write_bytes(b"\1" * 4096)
    os.symlink(tmp_path / "elsewhere", tmp_path / "linked.db-shm")
    assert WalIndex.open(str(tmp_path / "linked.db")) is None


def test_a_header_whose_copies_differ_or_not_set_up_has_no_state(tmp_path: Path) -> None:
    header = bytearray(48)
    header[12] = 1  # isInit
    (tmp_path / "a.db-shm").write_bytes(bytes(header) + bytes(header) + b"\0" * 100)
    index = WalIndex.open(str(tmp_path / "a.db"))
    assert index is not None and index.state() == bytes(header)
    index.close()
    assert index.state() is None  # closed: nothing to read
    racing = WalIndex.open(str(tmp_path / "a.db"))
    assert racing is not None
    mapped = racing._map
    assert mapped is not None
    mapped.close()  # closed under a reader that already holds the mapping
    assert racing.state() is None
    torn = bytearray(header)
    torn[16] = 7  # the first copy rewritten, the second not yet
    (tmp_path / "b.db-shm").write_bytes(bytes(torn) + bytes(header))
    not_set_up = bytes(48)
    (tmp_path / "c.db-shm").write_bytes(not_set_up + not_set_up)
    for name in ("b.db", "c.db"):
        index = WalIndex.open(str(tmp_path / name))
        assert index is not None and index.state() is None
        index.close()


# --- the memory ------------------------------------------------------------------------------------------


def test_a_marker_is_answered_under_its_own_state_only() -> None:
    memory = MarkerMemory()
    memory.put("s1", ("c1", 1), b"state-1")
    assert memory.get("s1", b"state-1") == ("c1", 1)
    assert memory.get("s1", b"state-2") is None  # something committed since
    assert memory.get("s2", b"state-1") is None
    memory.put("s1", ("c2", 2), b"state-2")
    assert memory.get("s1", b"state-1") is None
    assert memory.get("s1", b"state-2") == ("c2", 2)


def test_the_memory_is_bounded_and_drops_the_oldest() -> None:
    memory = MarkerMemory(max_markers=3)
    for n in range(5):
        memory.put(f"s{n}", (f"c{n}", n), b"state")
    assert [memory.get(f"s{n}", b"state") for n in range(5)] == [None, None, ("c2", 2), ("c3", 3), ("c4", 4)]


# --- the database --------------------------------------------------------------------------------------


def test_an_unchanged_store_is_answered_without_a_statement(db: SqliteDatabase, tmp_path: Path) -> None:
    store = new_store(db)
    with db.read_now() as tx:
        assert isinstance(tx, RememberingTx)
    marker = probe(db, store)
    assert marker == statement(tmp_path / "s.db", store)
    assert statements_run(db, store) == []  # remembered
    write_memory(db, store, "/notes/a.md")  # a commit: the next probe asks SQLite once, then remembers
    assert len(statements_run(db, store)) == 1
    assert probe(db, store) == statement(tmp_path / "s.db", store) != marker
    assert statements_run(db, store) == []


def test_a_write_by_another_process_on_the_same_file_is_seen_at_once(
    db: SqliteDatabase, tmp_path: Path
) -> None:
    store = new_store(db)
    marker = probe(db, store)
    other = SqliteDatabase(tmp_path / "s.db")  # another worker process, as far as this file is concerned
    try:
        write_memory(other, store, "/notes/from-the-other-worker.md")
    finally:
        other.close()
    after = probe(db, store)
    assert after != marker
    assert after == statement(tmp_path / "s.db", store)


def test_a_deleted_store_is_not_answered_from_memory(db: SqliteDatabase, tmp_path: Path) -> None:
    store = new_store(db)
    assert probe(db, store) is not None
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM stores WHERE id = ?", (store,))
        conn.commit()
    finally:
        conn.close()
    assert probe(db, store) is None


def test_an_in_memory_database_remembers_nothing(tmp_path: Path) -> None:
    database = SqliteDatabase(":memory:")
    try:
        with database.read_now() as tx:
            assert not isinstance(tx, RememberingTx)
    finally:
        database.close()


def test_a_database_whose_shm_is_a_symlink_is_refused(tmp_path: Path) -> None:
    """The server does not open such a database at all (so its WAL-index is never read through a link)."""
    path = tmp_path / "s.db"
    SqliteDatabase(path).close()  # the database exists; its last connection removed the -shm
    assert not (tmp_path / "s.db-shm").exists()
    (tmp_path / "elsewhere").write_bytes(b"\0" * 32768)
    os.symlink(tmp_path / "elsewhere", tmp_path / "s.db-shm")
    with pytest.raises(OSError, match=r"s\.db-shm"):
        SqliteDatabase(path)
    assert (tmp_path / "elsewhere").read_bytes() == b"\0" * 32768


def test_remembered_answers_match_statements_under_any_interleaving(
    db: SqliteDatabase, tmp_path: Path
) -> None:
    """Writes through this database, another database object and a bare connection, checkpoints and
    probes in a random order: every probe answers what a fresh statement reads at that moment."""
    rng = random.Random(20261206)
    stores = [new_store(db) for _ in range(3)]
    other = SqliteDatabase(tmp_path / "s.db")
    bare = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        for step in range(400):
            store = rng.choice(stores)
            action = rng.randrange(6)
            if action == 0:
                write_memory(db, store, f"/n/{step}.md")
            elif action == 1:
                write_memory(other, store, f"/n/{step}.md")
            elif action == 2:
                bare.execute("UPDATE stores SET change_seq = change_seq + 1 WHERE id = ?", (store,))
            elif action == 3:
                bare.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
            else:
                assert probe(db, store) == statement(tmp_path / "s.db", store), f"step {step}"
    finally:
        bare.close()
        other.close()
