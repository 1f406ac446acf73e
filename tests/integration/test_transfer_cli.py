"""``memsync store import`` and ``export`` as real processes: nothing overwritten or uploaded by surprise, a
server that stops answering is given up on with a way to resume, and Ctrl-C or SIGTERM says what was done.

Each test runs on SQLite only: what is tested is the command line, not the backend.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningStoreServer, StoreApi, launch_store_server

WAIT_S = 60.0


def cli_env(server: RunningStoreServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    env.update(MEMSYNC_STORE_URL=server.url, MEMSYNC_ADMIN_KEY=server.admin_key, PYTHONUNBUFFERED="1")
    return env


def memsync(
    server: RunningStoreServer, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", "store", *args],
        capture_output=True,
        text=True,
        env=cli_env(server),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStoreServer]:
    """One server for the module; a test that stops it starts it again."""
    running = launch_store_server(tmp_path_factory.mktemp("server"))
    yield running
    running.stop()


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def a_git_checkout(path: Path) -> Path:
    (path / ".git" / "refs").mkdir(parents=True)
    (path / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (path / "notes").mkdir()
    (path / "notes" / "todo.md").write_text("- ship it\n")
    (path / "build.log").write_text("noise\n")
    (path / "README.md").write_text("# a checkout\n")
    return path


def test_import_leaves_vcs_folders_and_excluded_files_out_and_dry_run_sends_nothing(
    server: RunningStoreServer, tmp_path: Path
) -> None:
    src = a_git_checkout(tmp_path / "src")
    (src / "linked").symlink_to(src / "notes")  # a link to a folder is listed, never followed
    api = StoreApi(server)
    try:
        store_id = api.new_store("Checkout")
        dry = memsync(server, "import", store_id, str(src), "--exclude", "*.log", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert sorted(dry.stdout.splitlines()) == ["create /README.md", "create /notes/todo.md"]
        assert "excluded .git/" in dry.stderr and "excluded build.log" in dry.stderr
        assert "skipped linked: symbolic link (not followed)" in dry.stderr
        assert "nothing was sent" in dry.stderr
        assert api.paths(store_id) == []

        done = memsync(server, "import", store_id, str(src), "--exclude", "*.log")
        assert done.returncode == 7, done.stderr  # partial: the link was skipped, and said
        assert "2 created" in done.stderr and "2 excluded" in done.stderr
        assert sorted(api.paths(store_id)) == ["/README.md", "/notes/todo.md"]

        (src / "README.md").write_text("# changed\n")
        again = memsync(server, "import", store_id, str(src), "--dry-run")
        assert sorted(again.stdout.splitlines()) == ["create /build.log", "update /README.md"]
        with_vcs = memsync(server, "import", store_id, str(src), "--include-vcs", "--dry-run")
        assert "create /.git/config" in with_vcs.stdout.splitlines()
    finally:
        api.close()


def test_export_never_writes_into_a_folder_that_holds_files_unless_told_how(
    server: RunningStoreServer, tmp_path: Path
) -> None:
    api = StoreApi(server)
    try:
        store_id = api.new_store("Export Target")
        api.create(store_id, "/.git/config", "[core]\n\tbare = true\n")
        api.create(store_id, "/notes/todo.md", "- from the store\n")
        api.create(store_id, "/same.md", "same\n")
    finally:
        api.close()
    checkout = a_git_checkout(tmp_path / "checkout")
    (checkout / "same.md").write_text("same\n")
    before = tree(checkout)

    refused = memsync(server, "export", store_id, str(checkout))
    assert refused.returncode == 2, refused.stderr
    assert "is not empty: nothing was written" in refused.stderr and "--merge" in refused.stderr
    assert tree(checkout) == before
    for empty in ("", " "):
        usage = memsync(server, "export", store_id, empty, cwd=checkout)
        assert usage.returncode == 2 and "must not be empty" in usage.stderr
    assert tree(checkout) == before

    merged = memsync(server, "export", store_id, str(checkout), "--merge")
    assert merged.returncode == 7, merged.stderr  # partial: what differs is listed and left alone
    assert "kept '/.git/config'" in merged.stderr and "kept '/notes/todo.md'" in merged.stderr
    assert "exported 1 memories" in merged.stderr  # same.md: there already, with the same content
    assert tree(checkout) == before

    fresh = tmp_path / "fresh" / "deeper"
    assert memsync(server, "export", store_id, str(fresh)).returncode == 0
    assert tree(fresh)["notes/todo.md"] == "- from the store\n"

    forced = memsync(server, "export", store_id, str(checkout), "--force")
    assert forced.returncode == 0, forced.stderr
    assert tree(checkout)["notes/todo.md"] == "- from the store\n"
    assert tree(checkout)["build.log"] == "noise\n"  # a file the store does not hold is left alone


def many_files(root: Path, count: int) -> Path:
    root.mkdir()
    for i in range(count):
        (root / f"note-{i:04d}.md").write_text(f"note {i}\n")
    return root


def start(server: RunningStoreServer, *args: str, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "memsync", "store", *args, "--progress"],
            stdout=subprocess.DEVNULL,
            stderr=out,
            stdin=subprocess.DEVNULL,
            text=True,
            env=cli_env(server),
        )


def wait_for(what: str, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while what not in log.read_text():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {what!r}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {what!r} in time:\n{log.read_text()}"
        time.sleep(0.02)


def test_an_import_gives_up_on_a_server_that_stopped_answering_and_resumes(
    server: RunningStoreServer, tmp_path: Path
) -> None:
    src = many_files(tmp_path / "src", 600)
    store_id = memsync(server, "create", "Outage").stdout.strip()
    log = tmp_path / "import.log"
    proc = start(server, "import", store_id, str(src), "--concurrency", "2", "--give-up-after", "2", log=log)
    try:
        wait_for("importing: ", proc, log)  # the first tenth is in
        server.kill()
        code = proc.wait(timeout=WAIT_S)
    finally:
        proc.kill()
    out = log.read_text()
    assert code == 5, out  # unreachable
    assert out.count("the store server does not answer") == 1, out
    assert "retrying store request" not in out
    error = out.splitlines()[-1]
    assert error.startswith("Error: the store server has not answered for "), out
    assert "not sent; run the same command again to resume" in error

    server.start()
    again = memsync(server, "import", store_id, str(src))
    assert again.returncode == 0, again.stderr
    summary = again.stderr.splitlines()[-1]
    created = int(summary.split(": ", 1)[1].split(" created")[0])
    assert 0 < created < 600 and f"{600 - created} unchanged" in summary


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_import_says_what_it_did_and_exits_with_the_signal(
    server: RunningStoreServer, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    src = many_files(tmp_path / "src", 800)
    store_id = memsync(server, "create", "Interrupted").stdout.strip()
    log = tmp_path / "import.log"
    proc = start(server, "import", store_id, str(src), "--concurrency", "2", log=log)
    try:
        wait_for("importing: ", proc, log)
        proc.send_signal(sig)
        assert proc.wait(timeout=WAIT_S) == code, log.read_text()
    finally:
        proc.kill()
    out = log.read_text()
    assert "Aborted" not in out and "Traceback" not in out
    last = out.splitlines()[-1]
    assert last.startswith(f"interrupted by {sig.name}: imported into {store_id}: "), out
    assert "not sent; run the same command again to resume" in last
