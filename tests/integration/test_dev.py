"""``memsync dev`` as a real process: embedded server, demo store, a synced folder, Ctrl-C (SIGINT) flushes.

The test edits, creates and deletes files in the mounted folder, checks through the API (with the admin key
file ``memsync dev`` wrote) that a periodic pass sent them, makes a last-moment edit right before SIGINT, and
checks on a second run (which must reuse the same store) that the final shutdown saved it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import free_port
from memsync.api.models import MemoryStore
from memsync.client import StoreClient
from support.dev_process import MARKER, WAIT_S, DevProcess
from support.sync_harness import store_contents

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dev_runs(tmp_path: Path) -> Iterator[list[DevProcess]]:
    runs: list[DevProcess] = []
    yield runs
    for run in runs:
        run.stop()


def admin_key(base: Path) -> str:
    return (base / "store.db.admin-key").read_text().strip()


async def _snapshot(url: str, key: str) -> tuple[list[MemoryStore], dict[str, str]]:
    async with StoreClient(url, api_key=key) as admin:
        stores = [s async for s in admin.list_stores()]
        demo = [s for s in stores if s.name == "Demo Memory"]
        files = await store_contents(admin, demo[0].id) if demo else {}
        return demo, files


def snapshot(run: DevProcess) -> tuple[list[MemoryStore], dict[str, str]]:
    return asyncio.run(_snapshot(run.url, admin_key(run.base)))


@contextlib.contextmanager
def served_again(run: DevProcess) -> Iterator[None]:
    """The stopped run's database served again (same port and admin key file) until the block ends."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memsync",
            "store",
            "serve",
            "--port",
            str(run.port),
            "--db",
            str(run.base / "store.db"),
            "--admin-key-file",
            str(run.base / "store.db.admin-key"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not _answers(run):
            assert server.poll() is None and time.monotonic() < deadline, "the store server did not answer"
            time.sleep(0.1)
        yield
    finally:
        server.terminate()
        server.wait(timeout=WAIT_S)


def _answers(run: DevProcess) -> bool:
    try:
        snapshot(run)
    except Exception:
        return False
    return True


def local_files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


def test_dev_lifecycle_syncs_flushes_on_sigint_and_reuses_the_store(
    tmp_path: Path, dev_runs: list[DevProcess]
) -> None:
    port = free_port()
    first = DevProcess(tmp_path, port)
    dev_runs.append(first)
    folder = first.base / "mnt" / "memory" / "demo-memory"
    first.wait_mounted()
    first.wait_for("the first pass", lambda: "passes 1," in first.output())
    # At start, before the mount, the two lines that point the CLI at this store.
    started = first.output()
    exports = [f"  export MEMSYNC_STORE_URL=http://127.0.0.1:{port}", "  export MEMSYNC_ADMIN_KEY_FILE="]
    assert all(line in started for line in exports), started
    assert started.index("export MEMSYNC_STORE_URL=") < started.index("is mounted at")

    stores, remote = snapshot(first)
    assert len(stores) == 1
    store_id = stores[0].id
    assert remote, "the demo store starts with a few memories"
    assert local_files(folder) == remote

    # Edit, create (in a new folder) and delete.
    edited, deleted = sorted(remote)[0], sorted(remote)[-1]
    (folder / edited).write_text("edited while memsync dev runs\n")
    (folder / "ideas").mkdir()
    (folder / "ideas" / "new.md").write_text("a brand-new memory\n")
    (folder / deleted).unlink()

    def landed() -> bool:
        _, now = snapshot(first)
        return now.get(edited) == "edited while memsync dev runs\n" and "ideas/new.md" in now

    first.wait_for("a pass to upload the edit and the new file", landed)
    _, remote = snapshot(first)
    assert remote["ideas/new.md"] == "a brand-new memory\n"
    # The deletion waits for its confirmation window (30 s), and the status line says so; the final shutdown
    # waives it.
    first.wait_for(
        "the status line to show the pending delete", lambda: "(+1 pending, confirmed in " in first.output()
    )

    (folder / "last-moment.md").write_text("written right before Ctrl-C\n")
    assert first.interrupt() == 0, first.output()
    out = first.output()
    assert "memory flush outcome" in out
    assert not folder.exists(), "the mounted folder is removed after the final flush"
    assert not (first.base / "mnt").exists()
    assert (first.base / "store.db").is_file()
    assert "memsync store export" in out and str(first.base / "store.db") in out
    assert "passes " in out and "uploads " in out  # the status line (plain lines: stderr is not a TTY)

    # A second run reuses the same store, and shows what the first run's final shutdown saved.
    second = DevProcess(tmp_path, port)
    dev_runs.append(second)
    second.wait_mounted()
    stores, remote = snapshot(second)
    assert [s.id for s in stores] == [store_id], "the second run found the demo store by name"
    assert remote["last-moment.md"] == "written right before Ctrl-C\n", "the final flush saved the last edit"
    assert deleted not in remote, "the final sync propagated the deletion"
    assert remote[edited] == "edited while memsync dev runs\n"
    assert local_files(folder) == remote
    assert "using the existing demo store" in second.output()
    assert second.interrupt() == 0, second.output()
    assert not folder.exists()


def test_dev_keeps_refused_files_aside_names_them_and_exits_partial(
    tmp_path: Path, dev_runs: list[DevProcess]
) -> None:
    run = DevProcess(tmp_path, free_port())
    dev_runs.append(run)
    folder = run.base / "mnt" / "memory" / "demo-memory"
    run.wait_mounted()
    big = "x" * 150_000
    (folder / "big.md").write_text(big)  # over the size limit
    (folder / "notes" / "blob.bin").write_bytes(b"\x00\xff\xfebinary")  # not UTF-8
    latin1 = os.fsdecode(b"caf\xe9.md")  # a Latin-1 file name: not a memory path
    (folder / latin1).write_text("name in Latin-1\n")
    (folder / "fine.md").write_text("this one syncs\n")
    run.wait_for("the status line to count the refused files", lambda: "refused 3," in run.output())
    assert run.interrupt() == 7, run.output()  # partial: files were left, and are named
    out = run.output()
    kept = run.base / "refused"
    assert (kept / "big.md").read_text() == big
    assert (kept / "notes" / "blob.bin").read_bytes() == b"\x00\xff\xfebinary"
    assert (kept / latin1).read_text() == "name in Latin-1\n"
    assert "3 file(s) the store did not take were moved aside" in out
    assert f"big.md (refused) -> {kept / 'big.md'}" in out
    assert "notes/blob.bin (refused)" in out and "caf\ufffd.md (refused)" in out
    assert not folder.exists(), "the folder itself is removed once nothing in it is lost"
    with served_again(run):
        _, remote = snapshot(run)
    assert remote["fine.md"] == "this one syncs\n"
    assert not {"big.md", "notes/blob.bin"} & set(remote)


def test_dev_sigterm_also_flushes_and_cleans_up(tmp_path: Path, dev_runs: list[DevProcess]) -> None:
    run = DevProcess(tmp_path, free_port())
    dev_runs.append(run)
    folder = run.base / "mnt" / "memory" / "demo-memory"
    run.wait_mounted()
    (folder / "from-sigterm.md").write_text("saved by the final shutdown\n")
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=WAIT_S) == 0, run.output()
    assert not folder.exists()
    # Check the store directly: serve the same database again with the admin key file.
    with served_again(run):
        _, remote = snapshot(run)
    assert remote["from-sigterm.md"] == "saved by the final shutdown\n"


def test_dev_environment_shows_a_scripted_session_writing_a_memory_that_lands_in_the_store(
    tmp_path: Path,
) -> None:
    base = tmp_path / ".memsync"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memsync",
            "dev",
            "--environment",
            "--dir",
            str(base),
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "the poll loop claimed it: SessionMemory" in out
    assert "Written by the scripted agent through `memsync session run`." in out
    assert "the session runner asked for the final sync and flush" in out
    assert "is stopped (at" in out
    assert out.index("final sync and flush done") < out.index(
        "/stop"
    )  # the stop request came after the flush
    assert "Succeeded and was removed after its retention" in out


def test_dev_on_a_port_in_use_says_so_before_the_server_says_ready(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memsync",
                "dev",
                "--dir",
                str(tmp_path / ".memsync"),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert (
        f"Error: the embedded store server: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(choose another with --port)"
    ) in out
    assert "store server ready" not in out and "Traceback" not in out


def test_a_second_dev_on_one_folder_is_refused_and_ctrl_c_at_start_names_the_signal(
    tmp_path: Path, dev_runs: list[DevProcess]
) -> None:
    first = DevProcess(tmp_path, free_port())
    dev_runs.append(first)
    first.wait_mounted()
    second = subprocess.run(
        [sys.executable, "-m", "memsync", "dev", "--port", str(free_port())],
        cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert second.returncode == 6, second.stderr  # conflict
    assert f"--dir {first.base} is in use by another memsync dev (pid {first.proc.pid})" in second.stderr
    assert first.interrupt() == 0, first.output()

    # Ctrl-C while it starts: the signal is named, the exit code is what it prints, never "Aborted!".
    early = DevProcess(tmp_path, free_port())
    dev_runs.append(early)
    early.wait_for("the server", lambda: "embedded store server listening" in early.output(), poll=0.002)
    code = early.interrupt()
    out = early.output()
    assert "SIGINT received" in out and "SIGTERM" not in out, out
    assert f"memsync dev stopped (exit {code})" in out and "Aborted" not in out, out
    if "is mounted at" in out:  # the signal came after the mount: it stops as Ctrl-C always does
        assert code == 0, out
    else:
        assert code == 130 and "interrupted by SIGINT: nothing was mounted" in out, out
