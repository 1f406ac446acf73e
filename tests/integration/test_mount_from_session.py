"""``memsync mount`` resolves the stores from the session (``MEMSYNC_STORES=session``) against a real store
server: the session's stores land at the session's mount paths, the sidecar's pass finds them through the
state directory; given stores that disagree with the session fail the mount with a message naming the
store and field, before anything is created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import RunningStoreServer
from memsync.agent.commands import run_mount, run_sync
from memsync.agent.config import load_config
from memsync.api.models import MemoryStoreResource
from memsync.contracts import env
from memsync.contracts.report import MountFailure, MountReport, Report, parse_report


async def mint(server: RunningStoreServer, tag: str) -> tuple[str, str, str, str]:
    """Two stores (one attached read-only) in a new session: (notes id, shared id, session id, secret)."""
    async with server.admin_client() as admin:
        notes = await admin.create_store(f"Notes {tag}")
        shared = await admin.create_store(f"Shared {tag}")
        await admin.create_memory(notes.id, "/todo.md", "- resolve the stores\n")
        await admin.create_memory(shared.id, "/policy.md", "read me\n")
        session, secret = await admin.mint_session(
            [
                MemoryStoreResource(memory_store_id=notes.id),
                MemoryStoreResource(memory_store_id=shared.id, access="read_only"),
            ]
        )
    return notes.id, shared.id, session.id, secret


def config(root: Path, secret: str, session_id: str, stores: Any, **kw: Any) -> Any:
    return load_config(
        stores=stores,
        work_secret=secret,
        session_id=session_id,
        test_root=str(root),
        state_dir="/var/lib/memsync",
        termination_log="/dev/termination-log",
        **kw,
    )


def termination(root: Path) -> Report | None:
    return parse_report((root / "dev" / "termination-log").read_text())


async def test_stores_omitted_are_read_from_the_session(
    store_server: RunningStoreServer, tmp_path: Path
) -> None:
    notes, shared, session_id, secret = await mint(store_server, "resolved")
    (tmp_path / "dev").mkdir()
    cfg = config(tmp_path, secret, session_id, env.STORES_FROM_SESSION)
    assert await run_mount(cfg) == 0
    memory = tmp_path / "mnt" / "memory"
    assert (memory / "notes-resolved" / "todo.md").read_text() == "- resolve the stores\n"
    assert (memory / "shared-resolved" / "policy.md").read_text() == "read me\n"
    assert termination(tmp_path) == MountReport(memories={notes: 1, shared: 1})

    # the sidecar's configuration says "session" too: it finds the resolved stores in the state directory
    (memory / "notes-resolved" / "new.md").write_text("from the agent\n")
    assert await run_sync(config(tmp_path, secret, session_id, env.STORES_FROM_SESSION), once=True) == 0
    async with store_server.admin_client() as admin:
        paths = sorted([m.path async for m in admin.list_memories(notes)])
    assert paths == ["/new.md", "/todo.md"]


async def test_given_stores_that_disagree_with_the_session_fail_the_mount(
    store_server: RunningStoreServer, tmp_path: Path
) -> None:
    notes, _, session_id, secret = await mint(store_server, "disagree")
    (tmp_path / "dev").mkdir()
    given = [{"memory_store_id": notes, "name": "Notes disagree", "access": "read_write"}]
    assert await run_mount(config(tmp_path, secret, session_id, json.dumps(given))) == 1
    report = termination(tmp_path)
    assert isinstance(report, MountFailure)
    assert report.error.startswith(f"spec.stores disagree with session {session_id}: ")
    assert "which spec.stores lacks" in report.error
    assert not (tmp_path / "mnt").exists()  # refused before anything was created


async def test_given_stores_that_agree_mount_as_given(
    store_server: RunningStoreServer, tmp_path: Path
) -> None:
    notes, shared, session_id, secret = await mint(store_server, "agree")
    (tmp_path / "dev").mkdir()
    given = [
        {"memory_store_id": notes, "name": "Notes agree", "access": "read_write"},
        {"memory_store_id": shared, "name": "Handbook", "access": "read_only"},  # a path of its own: allowed
    ]
    assert await run_mount(config(tmp_path, secret, session_id, json.dumps(given))) == 0
    assert (tmp_path / "mnt" / "memory" / "handbook" / "policy.md").read_text() == "read me\n"
    assert not (tmp_path / "var" / "lib" / "memsync" / env.RESOLVED_STORES_FILE).exists()
