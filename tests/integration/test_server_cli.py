"""``memsync store`` admin commands and ``serve`` as real processes."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import RunningStoreServer, StoreApi, free_port
from memsync.api.secret import decode_work_secret
from support.server_process import kill_process, run_cli, spawn_store_server, wait_until_ready

pytestmark = pytest.mark.both_backends


def _memsync(server: RunningStoreServer, *args: str, key: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, url=server.url, admin_key=server.admin_key if key else None)


def test_create_and_list(store_server: RunningStoreServer) -> None:
    made = _memsync(store_server, "store", "create", "CLI Store", "--description", "from the CLI")
    assert made.returncode == 0, made.stderr
    store_id = made.stdout.strip()
    assert store_id.startswith("memstore_")
    listed = _memsync(store_server, "store", "list")
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith(store_id))
    assert "CLI Store" in line
    assert store_server.admin_key not in listed.stdout + listed.stderr + made.stderr


def test_admin_commands_need_a_key(store_server: RunningStoreServer, tmp_path: Path) -> None:
    result = _memsync(store_server, "store", "list", key=False)
    assert result.returncode == 2
    assert "MEMSYNC_ADMIN_KEY" in result.stderr
    wrong = tmp_path / "wrong.key"
    wrong.write_text("not-the-key\n")
    result = _memsync(store_server, "store", "list", "--admin-key-file", str(wrong), key=False)
    assert result.returncode == 4  # unauthorized (docs/cli.md#errors-and-exit-codes)
    assert "401" in result.stderr
    assert "not-the-key" not in result.stderr
    right = tmp_path / "right.key"
    right.write_text(store_server.admin_key + "\n")
    assert _memsync(store_server, "store", "list", "--admin-key-file", str(right), key=False).returncode == 0


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_import_export_round_trip(store_server: RunningStoreServer, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "notes" / "deep").mkdir(parents=True)
    (src / "notes" / "todo.md").write_text("- buy milk\n")
    (src / "notes" / "deep" / "é.txt").write_text("unicode name and content: ü\r\n")
    (src / "empty.md").write_text("")
    for i in range(40):
        (src / "bulk" / f"{i:02d}.md").parent.mkdir(exist_ok=True)
        (src / "bulk" / f"{i:02d}.md").write_text(f"bulk {i}\n")
    (src / "binary.bin").write_bytes(b"\xff\xfe\x00binary")
    (src / "huge.txt").write_text("x" * 102_401)
    (src / "link.md").symlink_to(src / "empty.md")
    (src / ".anthropic-memory-store").write_text("version 1\nmemstore_other")
    expected = {
        k: v for k, v in _tree(src).items() if k not in {"binary.bin", "huge.txt", ".anthropic-memory-store"}
    }
    (src / os.fsdecode(b"latin-\xe9.md")).write_text("a file name that is not UTF-8")

    store_id = _memsync(store_server, "store", "create", "Round Trip").stdout.strip()
    result = _memsync(store_server, "store", "import", store_id, str(src), "--concurrency", "8")
    assert result.returncode == 7, result.stderr  # partial: the skipped files are listed
    assert "Traceback" not in result.stderr
    assert "skipped latin-\\xe9.md: the file name is not UTF-8" in result.stderr
    assert "skipped binary.bin: not UTF-8" in result.stderr
    assert "skipped huge.txt: 102401 bytes" in result.stderr
    assert f"{len(expected)} created" in result.stderr
    assert "skipped link.md: symbolic link" in result.stderr
    assert "4 skipped" in result.stderr
    assert result.stdout == ""

    api = StoreApi(store_server)
    try:
        assert sorted(api.paths(store_id)) == sorted("/" + k for k in expected)
    finally:
        api.close()

    # importing again changes nothing; an edited file becomes an update
    (src / "notes" / "todo.md").write_text("- buy oat milk\n")
    expected["notes/todo.md"] = b"- buy oat milk\n"
    for skipped in ("binary.bin", "huge.txt", "link.md", os.fsdecode(b"latin-\xe9.md")):
        (src / skipped).unlink()
    again = _memsync(store_server, "store", "import", store_id, str(src))
    assert again.returncode == 0, again.stderr
    assert "0 created, 1 updated" in again.stderr
    assert f"{len(expected) - 1} unchanged" in again.stderr

    out = tmp_path / "out"
    exported = _memsync(store_server, "store", "export", store_id, str(out))
    assert exported.returncode == 0, exported.stderr
    assert _tree(out) == expected


def test_export_refuses_unsafe_paths(store_server: RunningStoreServer, tmp_path: Path) -> None:
    api = StoreApi(store_server)
    try:
        store_id = api.new_store("Unsafe Export")
        api.create(store_id, "/ok.md", "fine")
        api.create(store_id, "/trap/inside.md", "must not land outside")
        api.create(store_id, "/" + "n" * 300, "a 300-byte file name is valid remotely, not on disk")
    finally:
        api.close()
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "trap").symlink_to(outside)  # a symlink planted where a directory would go
    assert _memsync(store_server, "store", "export", store_id, str(out)).returncode == 2  # not empty
    result = _memsync(store_server, "store", "export", store_id, str(out), "--force")
    assert result.returncode == 7  # partial
    assert "refused '/trap/inside.md'" in result.stderr
    assert "exceeds 255" in result.stderr
    assert list(outside.iterdir()) == []
    assert (out / "ok.md").read_text() == "fine"


def test_token_prints_only_the_secret(store_server: RunningStoreServer) -> None:
    api = StoreApi(store_server)
    try:
        one, two = api.new_store("Token One"), api.new_store("Token Two")
        result = _memsync(
            store_server,
            "store",
            "token",
            "--session",
            "sesn_cli_" + one[-8:],
            "--store",
            one,
            "--store",
            f"{two}:read_only",
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 1
        secret = decode_work_secret(lines[0])
        assert secret.api_base_url == store_server.url
        assert secret.sessions_token not in result.stderr
        session = api.bearer(secret.sessions_token, "GET", f"/v1/sessions/sesn_cli_{one[-8:]}").json()
        assert [(r["memory_store_id"], r["access"]) for r in session["resources"]] == [
            (one, "read_write"),
            (two, "read_only"),
        ]
    finally:
        api.close()
    bad = _memsync(store_server, "store", "token", "--store", "memstore_x:write_only")
    assert bad.returncode == 2
    assert bad.stdout == ""


def test_serve_generates_a_private_key_file_and_never_logs_the_key(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "gen.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    log = tmp_path / "serve.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memsync", "store", "serve", "--port", str(port), "--db", str(db)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(proc, url, log_text=log.read_text)
        key_file = tmp_path / "gen.db.admin-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert len(key) > 30
        resp = httpx.get(f"{url}/v1/memory_stores", headers={"x-api-key": key})
        assert resp.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    text = log.read_text()
    assert str(key_file) in text
    assert key not in text
    # uvicorn shuts down gracefully (lifespan end logged), then re-raises SIGTERM as its exit status
    assert "store server stopped" in text
    assert proc.returncode in (0, -signal.SIGTERM)


@pytest.mark.parametrize(
    "args", [["store", "--help"], ["store", "serve", "--help"], ["store", "import", "--help"]]
)
def test_help(store_server: RunningStoreServer, args: list[str]) -> None:
    result = _memsync(store_server, *args)
    assert result.returncode == 0
    assert "Usage" in result.stdout


def test_serve_on_a_port_in_use_says_so_before_anything_is_ready(
    store_server: RunningStoreServer, tmp_path: Path
) -> None:
    port = int(store_server.url.rsplit(":", 1)[1])
    db = tmp_path / "second.db"
    result = run_cli("store", "serve", "--port", str(port), "--db", str(db), admin_key="sk-memsync-admin-x")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert not db.exists()  # nothing was started, so nothing logged "ready" or "listening"


def test_ctrl_c_stops_serve_cleanly_without_aborted(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    log = tmp_path / "serve.log"
    proc = spawn_store_server(port=port, db_path=tmp_path / "c.db", log_path=log, env=env)
    try:
        wait_until_ready(proc, f"http://127.0.0.1:{port}", log_text=log.read_text)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    finally:
        kill_process(proc)
    out = log.read_text()
    lines = out.splitlines()
    listening = next(i for i, line in enumerate(lines) if "store server listening" in line)
    assert "store server ready" in lines[listening + 1]
    assert "store server stopped" in out
    assert "Aborted" not in out and "Traceback" not in out
    assert proc.returncode == 0


def test_serve_refuses_configuration_mistakes_naming_the_option_before_writing_anything(
    tmp_path: Path,
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("a file that is not a database\n")
    cases = [
        (["--db", str(junk)], None, f"--db '{junk}': the file is not an SQLite database"),
        (
            ["--db", str(tmp_path / "missing" / "x.db")],
            None,
            f"the folder {tmp_path / 'missing'} does not exist",
        ),
        (["--db", ""], None, "must not be empty"),
        (["--db", str(tmp_path)], None, "is a folder"),
        (["--host", "0.0.0.0", "--db", str(tmp_path / "w.db")], None, "--public-url is required with --host"),
        (
            ["--db", str(tmp_path / "k.db")],
            "short-admin-key",
            "has 15 characters; an admin key has at least 32",
        ),
    ]
    for args, key, said in cases:
        result = run_cli("store", "serve", "--port", "0", *args, admin_key=key)
        assert result.returncode == 2, (args, result.stderr)
        assert said in result.stderr, (args, result.stderr)
        assert "unexpected" not in result.stderr and "Traceback" not in result.stderr
        assert "short-admin-key" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.db"], "no key file, no database"
    assert junk.read_text() == "a file that is not a database\n"


def test_serve_on_an_unreachable_postgresql_is_exit_5_naming_its_host_and_port() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = run_cli(
        "store", "serve", "--port", "0", "--db", f"postgresql://memsync:pw-never-shown@127.0.0.1:{port}/store",
        admin_key="sk-ant-admin-test-0123456789abcdefghij",
    )  # fmt: skip
    assert result.returncode == 5, result.stderr
    assert f"--db: cannot connect to PostgreSQL at 127.0.0.1:{port}" in result.stderr
    assert "pw-never-shown" not in result.stderr and "unexpected" not in result.stderr
