"""``memsync store show|delete|archive|memories|history|redact`` and ``export --progress`` as real processes
against the real self-hosted server."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from conftest import RunningStoreServer
from memsync.client import errors

pytestmark = pytest.mark.both_backends

SECRET_CONTENT = "api_key=sk-live-leaked-by-mistake"


def cli_env(server: RunningStoreServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    env.update(MEMSYNC_STORE_URL=server.url, MEMSYNC_ADMIN_KEY=server.admin_key)
    return env


def memsync(
    server: RunningStoreServer, *args: str, stderr: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = cli_env(server)
    result = subprocess.run(
        [sys.executable, "-m", "memsync", "store", *args],
        capture_output=stderr is None,
        stdout=subprocess.PIPE if stderr is not None else None,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert server.admin_key not in (result.stdout or "") + (result.stderr or "")
    return result


async def make_store(server: RunningStoreServer, memories: dict[str, str], **kw: object) -> str:
    async with server.admin_client() as admin:
        store = await admin.create_store("Inspect Me", description="for the admin CLI")
        if kw.get("metadata"):
            await admin.update_store(store.id, metadata=kw["metadata"])  # type: ignore[arg-type]
        for path, content in memories.items():
            await admin.create_memory(store.id, path, content)
        return store.id


async def test_show_counts_memories_and_names_an_unknown_store(store_server: RunningStoreServer) -> None:
    store_id = await make_store(store_server, {"/a.md": "abc", "/d/b.md": "defg"}, metadata={"team": "x"})
    shown = memsync(store_server, "show", store_id)
    assert shown.returncode == 0, shown.stderr
    lines = dict(line.split(":", 1) for line in shown.stdout.splitlines())
    assert lines["name"].strip() == "Inspect Me"
    assert lines["description"].strip() == "for the admin CLI"
    assert lines["metadata"].strip() == "team=x"
    assert lines["archived"].strip() == "no"
    assert lines["memories"].strip() == "2 (7 B)"
    data = json.loads(memsync(store_server, "show", store_id, "--json").stdout)
    assert (data["id"], data["memory_count"], data["total_size_bytes"]) == (store_id, 2, 7)

    missing = memsync(store_server, "show", "memstore_doesnotexist")
    assert missing.returncode == 3  # not found
    assert "STORE_ID 'memstore_doesnotexist'" in missing.stderr and "404" in missing.stderr


async def test_memories_is_a_tree_without_content(store_server: RunningStoreServer) -> None:
    store_id = await make_store(
        store_server,
        {
            "/top.md": "x" * 2048,
            "/notes/todo.md": SECRET_CONTENT,
            "/notes/deep/é.txt": "ü",
            "/notes-b.md": "",
        },
    )
    result = memsync(store_server, "memories", store_id)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{store_id} (4 memories, 2.0 KiB)"
    tree = [line.rsplit("   ", 2)[0].rstrip() if "mem_" in line else line for line in lines[1:]]
    assert tree == [
        "├── notes/",
        "│   ├── deep/",
        "│   │   └── é.txt",
        "│   └── todo.md",
        "├── notes-b.md",
        "└── top.md",
    ]
    assert "2.0 KiB   mem_" in lines[-1]
    assert SECRET_CONTENT not in result.stdout

    as_json = memsync(store_server, "memories", store_id, "--json", "--prefix", "/notes/")  # = -o json
    items = json.loads(as_json.stdout)["items"]
    assert [i["path"] for i in items] == ["/notes/deep/é.txt", "/notes/todo.md"]
    assert all("content" not in i for i in items)
    assert SECRET_CONTENT not in as_json.stdout


async def test_history_by_path_or_id_and_redact(store_server: RunningStoreServer) -> None:
    store_id = await make_store(store_server, {})
    async with store_server.admin_client() as admin:
        created = await admin.create_memory(store_id, "/creds.md", SECRET_CONTENT)
        await admin.update_memory(store_id, created.id, content="no secrets here")
        head = await admin.update_memory(store_id, created.id, path="/clean.md")

    by_path = memsync(store_server, "history", store_id, "/clean.md")
    assert by_path.returncode == 0, by_path.stderr
    rows = [line.split() for line in by_path.stdout.splitlines()]
    assert rows[0][:4] == ["VERSION", "OPERATION", "CREATED", "BY"]
    assert [r[1] for r in rows[1:]] == ["modified", "modified", "created"]
    assert [r[-2] for r in rows[1:]] == ["/clean.md", "/creds.md", "/creds.md"]
    assert all(r[3].startswith("apikey_") and r[-1] == "no" for r in rows[1:])
    assert SECRET_CONTENT not in by_path.stdout
    versions = json.loads(memsync(store_server, "history", store_id, created.id, "-o", "json").stdout)[
        "items"
    ]
    assert [v["id"] for v in versions] == [r[0] for r in rows[1:]]
    assert versions[0]["id"] == head.memory_version_id
    first = versions[-1]["id"]

    # Redaction is irreversible: off a terminal it needs --yes, and nothing happens without it.
    refused = memsync(store_server, "redact", store_id, first)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    async with store_server.admin_client() as admin:
        assert (await admin.get_version(store_id, first, view="full")).content == SECRET_CONTENT
    done = memsync(store_server, "redact", store_id, first, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"redacted {first} of {created.id} at ")
    async with store_server.admin_client() as admin:
        version = await admin.get_version(store_id, first, view="full")
        assert version.content is None and version.redacted_at is not None
    after = memsync(store_server, "history", store_id, "/clean.md").stdout.splitlines()[-1].split()
    assert after[0] == first and after[-1] != "no"

    # The head of a live memory cannot be redacted; the refusal names the argument.
    head_refused = memsync(store_server, "redact", store_id, head.memory_version_id, "--yes", "--json")
    assert head_refused.returncode == 6  # conflict
    assert f"VERSION_ID '{head.memory_version_id}'" in head_refused.stderr and "409" in head_refused.stderr

    unknown = memsync(store_server, "history", store_id, "/nowhere.md")
    assert (
        unknown.returncode == 3
        and "MEMORY '/nowhere.md': no memory, live or deleted, at this path" in unknown.stderr
    )


async def test_archive_then_delete(store_server: RunningStoreServer) -> None:
    store_id = await make_store(store_server, {"/a.md": "a"})
    archived = memsync(store_server, "archive", store_id, "--json")
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["archived_at"]
    async with store_server.admin_client() as admin:
        with pytest.raises(errors.Conflict):
            await admin.create_memory(store_id, "/b.md", "refused: archived")
    assert "archived:    20" in memsync(store_server, "show", store_id).stdout

    refused = memsync(store_server, "delete", store_id)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    async with store_server.admin_client() as admin:
        assert (await admin.get_store(store_id)).id == store_id
    deleted = memsync(store_server, "delete", store_id, "--yes", "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == {"type": "memory_store_deleted", "id": store_id}
    async with store_server.admin_client() as admin:
        with pytest.raises(errors.NotFound):
            await admin.get_store(store_id)
    again = memsync(store_server, "delete", store_id, "--yes")
    assert again.returncode == 3 and f"STORE_ID '{store_id}'" in again.stderr


async def test_export_progress_on_a_terminal_as_lines_with_progress_and_silent_otherwise(
    store_server: RunningStoreServer, tmp_path: Path
) -> None:
    store_id = await make_store(store_server, {f"/m/{i:02d}.md": f"memory {i}\n" for i in range(25)})

    quiet = memsync(store_server, "export", store_id, str(tmp_path / "quiet"))
    assert quiet.returncode == 0, quiet.stderr
    assert "exporting" not in quiet.stderr
    assert len(list((tmp_path / "quiet" / "m").iterdir())) == 25

    lines = memsync(store_server, "export", store_id, str(tmp_path / "lines"), "--progress")
    assert lines.returncode == 0, lines.stderr
    steps = [line for line in lines.stderr.splitlines() if line.startswith("exporting:")]
    assert steps[0] == "exporting: 3/25 (12%)" and steps[-1] == "exporting: 25/25 (100%)"
    assert len(steps) == 10

    # On a terminal: click's bar, redrawn in place, with the count.
    controller, terminal = pty.openpty()
    drawn: list[bytes] = []

    def read_terminal() -> None:  # drained while the command runs: a full pty would block it
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO once the last writer has closed
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=read_terminal)
    reader.start()
    try:
        on_tty = memsync(store_server, "export", store_id, str(tmp_path / "tty"), stderr=terminal)
    finally:
        os.close(terminal)
        reader.join(timeout=30)
        os.close(controller)
    assert on_tty.returncode == 0
    text = b"".join(drawn).decode(errors="replace")
    assert "exporting" in text and "25/25" in text and "\r" in text
    none = memsync(
        store_server, "export", store_id, str(tmp_path / "none"), "--no-progress", stderr=subprocess.PIPE
    )
    assert "exporting" not in none.stderr


def answer_on_a_terminal(server: RunningStoreServer, answer: str, *args: str) -> tuple[int, str]:
    """A store command with a terminal as stdin and stderr, typing ``answer``: (exit code, what it showed)."""
    env = cli_env(server)
    controller, terminal = pty.openpty()
    shown: list[bytes] = []
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memsync", "store", *args],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=terminal,
            env=env,
        )
        os.close(terminal)
        terminal = -1
        while b"[y/N]" not in b"".join(shown):
            chunk = os.read(controller, 4096)
            assert chunk, b"".join(shown)
            shown.append(chunk)
        os.write(controller, answer.encode() + b"\n")
        proc.wait(timeout=120)
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
    text = b"".join(shown).decode(errors="replace")
    assert server.admin_key not in text
    return proc.returncode, text


async def test_delete_asks_at_a_terminal_and_no_keeps_the_store(store_server: RunningStoreServer) -> None:
    store_id = await make_store(store_server, {"/a.md": "a", "/b.md": "b"})
    code, shown = answer_on_a_terminal(store_server, "n", "delete", store_id)
    assert code == 1 and "Inspect Me" in shown and "its 2 memories" in shown
    async with store_server.admin_client() as admin:
        assert (await admin.get_store(store_id)).id == store_id
    code, shown = answer_on_a_terminal(store_server, "y", "delete", store_id)
    assert code == 0, shown
    async with store_server.admin_client() as admin:
        with pytest.raises(errors.NotFound):
            await admin.get_store(store_id)


async def test_a_deleted_memory_is_listed_its_history_and_content_reachable_and_redactable(
    store_server: RunningStoreServer,
) -> None:
    store_id = await make_store(store_server, {"/kept.md": "stays"})
    async with store_server.admin_client() as admin:
        leaked = await admin.create_memory(store_id, "/notes/leak.md", SECRET_CONTENT)
        await admin.delete_memory(store_id, leaked.id)

    # Not among the live memories; listed with --deleted, in every output format.
    assert "leak.md" not in memsync(store_server, "memories", store_id).stdout
    gone = memsync(store_server, "memories", store_id, "--deleted")
    assert gone.returncode == 0, gone.stderr
    rows = [line.split() for line in gone.stdout.splitlines()]
    assert rows[0] == ["PATH", "DELETED", "BY", "MEMORY"]
    assert [(r[0], r[-1]) for r in rows[1:]] == [("/notes/leak.md", leaked.id)]
    data = json.loads(memsync(store_server, "memories", store_id, "--deleted", "-o", "json").stdout)
    assert [(i["memory_id"], i["operation"]) for i in data["items"]] == [(leaked.id, "deleted")]
    as_yaml = yaml.safe_load(memsync(store_server, "memories", store_id, "--deleted", "-o", "yaml").stdout)
    assert as_yaml == data
    assert SECRET_CONTENT not in gone.stdout

    # Its history by its last path; a version's content with cat --version; then redacted for good.
    history = json.loads(memsync(store_server, "history", store_id, "/notes/leak.md", "-o", "json").stdout)
    ops = [(v["operation"], v["id"]) for v in history["items"]]
    assert [op for op, _ in ops] == ["deleted", "created"]
    written = ops[1][1]
    shown = memsync(store_server, "cat", store_id, "--version", written)
    assert shown.returncode == 0 and shown.stdout == SECRET_CONTENT
    live_cat = memsync(store_server, "cat", store_id, "/notes/leak.md")
    assert live_cat.returncode == 3 and "deleted; print one of its versions with --version" in live_cat.stderr
    assert memsync(store_server, "redact", store_id, written, "--yes").returncode == 0
    after = memsync(store_server, "cat", store_id, "--version", written)
    assert after.returncode == 3 and f"--version '{written}': redacted at " in after.stderr
    assert "Traceback" not in live_cat.stderr + after.stderr

    # cat of a live memory, by path or id.
    assert memsync(store_server, "cat", store_id, "/kept.md").stdout == "stays"
    no_arg = memsync(store_server, "cat", store_id)
    assert no_arg.returncode == 2 and "give MEMORY or --version" in no_arg.stderr


async def test_listings_share_one_shape_and_have_wide_tables(store_server: RunningStoreServer) -> None:
    store_id = await make_store(store_server, {"/a.md": "abc"})
    listed = json.loads(memsync(store_server, "list", "-o", "json").stdout)
    assert store_id in [s["id"] for s in listed["items"]]
    wide = memsync(store_server, "list", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["ID", "NAME", "CREATED", "ARCHIVED", "UPDATED", "DESCRIPTION"]
    assert any(line.startswith(store_id) and "for the admin CLI" in line for line in wide)
    memories = memsync(store_server, "memories", store_id, "-o", "wide").stdout.splitlines()
    assert memories[0].split() == ["PATH", "SIZE", "SHA256", "UPDATED", "MEMORY"]
    assert memories[1].startswith("/a.md ")
    history = memsync(store_server, "history", store_id, "/a.md", "-o", "wide").stdout.splitlines()
    assert history[0].split()[-1] == "MEMORY" and len(history[1].split()[6]) == 64  # the whole hash
    clash = memsync(store_server, "list", "--json", "-o", "yaml")
    assert clash.returncode == 2 and "--json is -o json" in clash.stderr


async def test_every_command_that_prints_an_object_takes_o_and_paths_start_at_the_root(
    store_server: RunningStoreServer,
) -> None:
    store_id = await make_store(store_server, {"/a.md": "abc", "/sub/b.md": "defg"})
    made = yaml.safe_load(memsync(store_server, "create", "Made Here", "-o", "yaml").stdout)
    assert made["name"] == "Made Here" and made["id"].startswith("memstore_")
    alias = json.loads(memsync(store_server, "create", "Made Too", "--json").stdout)  # the documented alias
    assert alias["name"] == "Made Too"
    shown = yaml.safe_load(memsync(store_server, "show", store_id, "-o", "yaml").stdout)
    assert (shown["id"], shown["memory_count"]) == (store_id, 2)
    assert memsync(store_server, "show", store_id, "-o", "wide").stdout.startswith("id:")

    history = memsync(store_server, "history", store_id, "a.md", "-o", "json")
    assert history.returncode == 0, history.stderr
    assert [v["path"] for v in json.loads(history.stdout)["items"]] == ["/a.md"]
    assert "'a.md' is taken from the store's root, as '/a.md'" in history.stderr
    assert memsync(store_server, "cat", store_id, "sub/b.md").stdout == "defg"
    for prefix in ("sub", "sub/", "/sub", "/sub/"):
        listed = memsync(store_server, "memories", store_id, "--prefix", prefix, "-o", "json")
        assert listed.returncode == 0, (prefix, listed.stderr)
        assert [m["path"] for m in json.loads(listed.stdout)["items"]] == ["/sub/b.md"]

    archived = json.loads(memsync(store_server, "archive", made["id"], "-o", "json").stdout)
    assert archived["archived_at"] is not None
    deleted = yaml.safe_load(memsync(store_server, "delete", made["id"], "--yes", "-o", "yaml").stdout)
    assert deleted["id"] == made["id"]
