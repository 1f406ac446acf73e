"""The session lifecycle scenarios on one machine.

Each scenario: real stores on the real store server -> a SessionMemory spec -> the Pod ``build_sandbox_pod``
makes -> the local Pod runner executes it (``memsync mount``, the ``memsync sync`` sidecar with its preStop
``memsync flush``, the scripted agent as the sandbox) -> the store holds exactly what the agent's report
says, and the controller's status logic, fed with the runner's Pod status, gives the documented outcome.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from memsync.agent import messages
from memsync.api.hashing import content_sha256
from memsync.api.paths import default_mount_path
from memsync.controller.conditions import condition
from memsync.controller.sessionmemory.outcome import parse_termination_message

if TYPE_CHECKING:
    from conftest import RunningStoreServer
from .harness import (
    MOUNT_CONTAINER,
    SANDBOX_CONTAINER,
    SYNC_CONTAINER,
    Session,
    agent_command,
    as_store_paths,
    container_status,
    secret_object,
    session_id,
    store_files,
)

pytestmark = pytest.mark.timeout(150)
RUN_TIMEOUT = 120.0


async def make_store(server: RunningStoreServer, name: str, memories: dict[str, str]) -> str:
    async with server.admin_client() as admin:
        store = await admin.create_store(f"{name}-{session_id()[-6:]}")
        for path, content in memories.items():
            await admin.create_memory(store.id, path, content)
        return store.id


async def versions(server: RunningStoreServer, store_id: str) -> list[tuple[str, str]]:
    """(memory_id, operation) of every version of a store."""
    async with server.admin_client() as admin:
        return [(v.memory_id, v.operation) async for v in admin.list_versions(store_id)]


async def files_of(server: RunningStoreServer, store_id: str) -> dict[str, str]:
    async with server.admin_client() as admin:
        return await store_files(admin, store_id)


async def wait_for_memories(server: RunningStoreServer, store: str, count: int, session: Session) -> None:
    """Wait until the sidecar synced ``count`` agent files (mid-session), else fail with the Pod's story."""
    deadline = asyncio.get_running_loop().time() + 60
    while len(await files_of(server, store)) < count:
        if session.runner.finished or asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"the store never held {count} memories mid-session\n{session.explain()}")
        await asyncio.sleep(0.1)


async def run(session: Session) -> dict[str, Any]:
    await session.runner.start()
    try:
        return await session.runner.wait(timeout=RUN_TIMEOUT)
    except TimeoutError:
        pytest.fail(f"the Pod did not finish in {RUN_TIMEOUT}s\n{session.explain()}")


async def new_session(
    tmp_path: Path,
    server: RunningStoreServer,
    name: str,
    stores: list[tuple[str, str, str]],
    sandbox: dict[str, Any],
    *,
    secret_value: str | None = None,
    mint: bool = True,
    **kw: Any,
) -> Session:
    sid = session_id()
    if secret_value is None and mint:
        secret_value = await server.mint_secret([(i, a) for i, _, a in stores], session_id=sid)
    secrets = [] if secret_value is None else [secret_object(f"{name}-work", secret_value)]
    return Session.create(
        name=name,
        workdir=tmp_path / name,
        base_url=server.url,
        stores=stores,
        sandbox=sandbox,
        secrets=secrets,
        secret_name=f"{name}-work",
        sid=sid,
        **kw,
    )


def assert_succeeded(session: Session, pod_status: dict[str, Any]) -> dict[str, Any]:
    assert pod_status["phase"] == "Succeeded", session.explain()
    status = session.status()
    assert status["phase"] == "Succeeded", (status, session.explain())
    assert condition(status, "Flushed")["status"] == "True", status  # type: ignore[index]
    return status


# --------------------------------------------------------------------------------------------------------
# 1. Happy path
# --------------------------------------------------------------------------------------------------------


async def test_happy_path_two_stores_one_read_only(tmp_path: Path, store_server: RunningStoreServer) -> None:
    notes = await make_store(
        store_server, "notes", {"/existing.md": "from the store\n", "/sub/keep.md": "k\n"}
    )
    handbook_content = {"/rules.md": "be kind\n", "/guide/intro.md": "welcome\n"}
    handbook = await make_store(store_server, "handbook", handbook_content)
    handbook_versions = await versions(store_server, handbook)
    session = await new_session(
        tmp_path,
        store_server,
        "happy",
        [(notes, "notes", "read_write"), (handbook, "handbook", "read_only")],
        agent_command("--read-only", "handbook", "--duration", "10", "--interval", "0.2", "--seed", "1"),
    )
    async with session.runner:
        pod_status = await run(session)
        status = assert_succeeded(session, pod_status)
        report = session.report()

    # the store holds exactly the agent's final state
    written = report["stores"]["/mnt/memory/notes"]
    assert report["ticks"] > 20 and written["deleted"], report["operations"]  # it really churned
    assert await files_of(store_server, notes) == as_store_paths(written["files"])
    # the read-only store is untouched, and the agent did read it as it was
    assert await files_of(store_server, handbook) == {
        p: content_sha256(c) for p, c in handbook_content.items()
    }
    assert await versions(store_server, handbook) == handbook_versions
    assert as_store_paths(report["read_only"]["/mnt/memory/handbook"]["files"]) == {
        p: content_sha256(c) for p, c in handbook_content.items()
    }
    # the mount reported both stores; the status carries per-store results
    mounted = parse_termination_message(session.runner.termination_message(MOUNT_CONTAINER))
    assert mounted is not None and getattr(mounted, "memories", None) == {notes: 2, handbook: 2}
    per_store = {entry["memoryStoreId"]: entry for entry in status["stores"]}
    assert set(per_store) == {notes, handbook}
    assert per_store[notes]["memoriesMounted"] == 2 and per_store[handbook]["memoriesMounted"] == 2
    assert per_store[notes]["mountPath"] == "/mnt/memory/notes"
    assert per_store[notes]["unsent"] == 0 and per_store[notes]["refused"] == 0
    counts = ("uploaded", "deleted", "conflicts", "refused", "unsent")
    assert {k: per_store[handbook][k] for k in counts} == dict.fromkeys(counts, 0)
    assert container_status(pod_status, SANDBOX_CONTAINER)["state"]["terminated"]["exitCode"] == 0
    assert container_status(pod_status, SYNC_CONTAINER)["restartCount"] == 0


async def test_stores_omitted_from_the_spec_are_read_from_the_session(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    """A hand-made SessionMemory without spec.stores: the mount reads them from the session (at the
    session's mount path), the sidecar syncs them, the status lists what the Pod reported."""
    notes = await make_store(store_server, "notes", {"/existing.md": "from the store\n"})
    async with store_server.admin_client() as admin:
        mount_path = default_mount_path((await admin.get_store(notes)).name, notes)
    session = await new_session(
        tmp_path,
        store_server,
        "fromsession",
        [(notes, "notes", "read_write")],  # minted into the session only
        agent_command("--duration", "3", "--interval", "0.2", "--seed", "2"),
        stores_from_session=True,
    )
    assert session.spec.stores is None
    async with session.runner:
        pod_status = await run(session)
        status = assert_succeeded(session, pod_status)
        report = session.report()
    assert list(report["stores"]) == [mount_path] != ["/mnt/memory/notes"]
    assert await files_of(store_server, notes) == as_store_paths(report["stores"][mount_path]["files"])
    assert [(e["memoryStoreId"], e["memoriesMounted"]) for e in status["stores"]] == [(notes, 1)]
    assert status["storeCount"] == 1


# --------------------------------------------------------------------------------------------------------
# 2. Two sessions on one store
# --------------------------------------------------------------------------------------------------------


async def test_two_sessions_share_a_store_and_the_store_wins_a_conflict(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "team", {"/shared.md": "original\n"})
    sessions = []
    for who in ("alice", "bob"):
        args = ["--prefix", who, "--name", who, "--first-edit", "shared.md", "--scenario", "churn"]
        sessions.append(
            await new_session(
                tmp_path,
                store_server,
                who,
                [(store, "team", "read_write")],
                agent_command(*args, "--duration", "10", "--interval", "0.2", "--seed", str(len(sessions))),
                interval=8,  # both agents edit shared.md at their start, long before either's next sync
            )
        )
    alice, bob = sessions
    async with alice.runner, bob.runner:
        statuses = await asyncio.gather(run(alice), run(bob))
        for session, pod_status in zip(sessions, statuses, strict=True):
            assert_succeeded(session, pod_status)
        reports = [s.report() for s in sessions]
        # separate filesystems: each Pod has its own volume
        assert alice.runner.volume_dir("memory") != bob.runner.volume_dir("memory")

        remote = await files_of(store_server, store)
        for who, report in zip(("alice", "bob"), reports, strict=True):
            mine = {
                p: s
                for p, s in report["stores"]["/mnt/memory/team"]["files"].items()
                if p.startswith(f"{who}/")
            }
            assert {p: s for p, s in remote.items() if p.startswith(f"/{who}/")} == as_store_paths(mine)
        # the conflicting edit: exactly one agent's version is in the store, and the other session's sync
        # agent kept the remote version and said so
        edits = {who: content_sha256(f"{who} rewrote this first\n") for who in ("alice", "bob")}
        winner = next(who for who, sha in edits.items() if remote["/shared.md"] == sha)
        loser = bob if winner == "alice" else alice
        winning = alice if winner == "alice" else bob
        # (BOTH_CHANGED when its merge saw both edits; UPLOAD_LOST when its upload raced the other's)
        assert messages.BOTH_CHANGED in loser.sync_logs() or messages.UPLOAD_LOST in loser.sync_logs(), (
            loser.explain()
        )
        assert "memory changed both locally and remotely" not in winning.sync_logs()
        # the loser's folder ends with the store's version
        loser_file = loser.runner.volume_dir("memory") / "team" / "shared.md"
        assert content_sha256(loser_file.read_text()) == remote["/shared.md"]


# --------------------------------------------------------------------------------------------------------
# 3. Deleted while the agent is still writing
# --------------------------------------------------------------------------------------------------------


async def test_deletion_while_the_agent_writes_keeps_every_edit(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "journal", {})
    session = await new_session(
        tmp_path,
        store_server,
        "deleted",
        [(store, "journal", "read_write")],
        # an agent that keeps writing for 2 s after its SIGTERM: those edits land during the preStop window
        agent_command("--scenario", "steady", "--duration", "120", "--interval", "0.2", "--term-linger", "2"),
    )
    async with session.runner:
        await session.runner.start()
        # mid-session: the sidecar has synced some of the agent's files already
        await wait_for_memories(store_server, store, 3, session)
        pod_status = await session.delete()
        report = session.report()
        status = session.status()

    assert report["interrupted"] is True
    assert report["sigterm_tick"] is not None and report["ticks"] > report["sigterm_tick"] + 3
    written = report["stores"]["/mnt/memory/journal"]["files"]
    assert await files_of(store_server, store) == as_store_paths(written), session.explain()
    after_sigterm = [p for p in written if int(re.findall(r"(\d+)\.md$", p)[0]) > report["sigterm_tick"]]
    assert after_sigterm  # the edits made while preStop ran are in the store (checked just above)
    ev = session.runner.event_index
    assert (
        ev(SYNC_CONTAINER, "prestop-start") < ev(SANDBOX_CONTAINER, "exited") < ev(SYNC_CONTAINER, "sigterm")
    )
    assert container_status(pod_status, SANDBOX_CONTAINER)["state"]["terminated"]["exitCode"] == 0
    flushed = parse_termination_message(session.runner.termination_message(SYNC_CONTAINER))
    assert flushed is not None and getattr(flushed, "complete", None) is True, session.explain()
    assert status["phase"] == "Succeeded", status
    assert condition(status, "Flushed")["status"] == "True", status  # type: ignore[index]


# --------------------------------------------------------------------------------------------------------
# 4. The sidecar is SIGKILLed mid-session and restarted
# --------------------------------------------------------------------------------------------------------


async def test_sidecar_killed_mid_session_loses_and_duplicates_nothing(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "scratch", {})
    session = await new_session(
        tmp_path,
        store_server,
        "killed",
        [(store, "scratch", "read_write")],
        agent_command("--scenario", "steady", "--duration", "14", "--interval", "0.2"),
    )
    async with session.runner:
        runner = session.runner
        await runner.start()
        await wait_for_memories(store_server, store, 3, session)
        await runner.kill(SYNC_CONTAINER)  # no preStop, no final flush: the baseline on disk is all it has
        await runner.wait_until(
            lambda r: r.restart_count(SYNC_CONTAINER) == 1 and r.is_running(SYNC_CONTAINER),
            30,
            "sidecar restart",
        )
        assert runner.is_running(SANDBOX_CONTAINER)  # the agent kept working through the crash
        pod_status = await runner.wait(timeout=RUN_TIMEOUT)
        status = assert_succeeded(session, pod_status)
        report = session.report()

    sync = container_status(pod_status, SYNC_CONTAINER)
    assert sync["restartCount"] == 1
    assert sync["lastState"]["terminated"]["exitCode"] == 137
    written = report["stores"]["/mnt/memory/scratch"]["files"]
    remote = await files_of(store_server, store)
    assert remote == as_store_paths(written), session.explain()  # nothing lost
    # nothing duplicated: every file was written once, so every memory has exactly one version, a create
    history = await versions(store_server, store)
    assert sorted(op for _, op in history) == ["created"] * len(remote)
    assert len({memory_id for memory_id, _ in history}) == len(remote)
    assert status["stores"][0]["unsent"] == 0


# --------------------------------------------------------------------------------------------------------
# 5. No usable work-item secret
# --------------------------------------------------------------------------------------------------------


async def test_secret_without_sessions_token_fails_before_the_agent_starts(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "tokenless", {"/a.md": "a\n"})
    not_a_token = base64_json({"api_base_url": store_server.url})
    session = await new_session(
        tmp_path,
        store_server,
        "tokenless",
        [(store, "tokenless", "read_write")],
        agent_command("--duration", "5"),
        secret_value=not_a_token,
    )
    async with session.runner:
        pod_status = await run(session)
    assert_never_started(session, pod_status)
    mount = container_status(pod_status, MOUNT_CONTAINER)["state"]["terminated"]
    assert mount["exitCode"] == 1
    report = json.loads(mount["message"])
    assert report["phase"] == "mount_failed"
    assert report["error"].startswith(messages.NO_SESSIONS_TOKEN)
    status = session.status()
    assert status["phase"] == "Failed"
    assert messages.NO_SESSIONS_TOKEN in status["message"]
    assert condition(status, "Ready")["reason"] == "MountFailed"  # type: ignore[index]
    assert "sessions_token" not in session.runner.logs(MOUNT_CONTAINER).replace("'sessions_token' field", "")


async def test_missing_secret_never_starts_the_agent(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "nosecret", {"/a.md": "a\n"})
    session = await new_session(
        tmp_path,
        store_server,
        "nosecret",
        [(store, "nosecret", "read_write")],
        agent_command("--duration", "5"),
        mint=False,
    )
    async with session.runner:
        pod_status = await run(session)
        assert pod_status["phase"] == "Pending"  # the kubelet keeps retrying; the operator decides
        waiting = container_status(pod_status, MOUNT_CONTAINER)["state"]["waiting"]
        assert waiting == {
            "reason": "CreateContainerConfigError",
            "message": 'secret "nosecret-work" not found',
        }
        assert not session.runner.host_path(SANDBOX_CONTAINER, "/tmp/agent-report.json").exists()
        assert container_status(pod_status, SANDBOX_CONTAINER)["state"] == {
            "waiting": {"reason": "PodInitializing"}
        }
        # What the operator shows for it: it refuses before creating the Pod (see test_pipeline for the
        # whole chain); from the Pod alone, the status says why the session cannot start.
        status = session.status()
        assert status["phase"] == "Pending"
        assert 'secret "nosecret-work" not found' in status["message"]


# --------------------------------------------------------------------------------------------------------
# 6. A store that cannot be mounted
# --------------------------------------------------------------------------------------------------------


async def test_something_at_the_mount_path_fails_the_mount(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "blocked", {"/a.md": "a\n"})
    session = await new_session(
        tmp_path,
        store_server,
        "blocked",
        [(store, "blocked", "read_write")],
        agent_command("--duration", "5"),
    )
    async with session.runner:
        session.runner.prepare()
        (session.runner.volume_dir("memory") / "blocked").write_text("not a folder\n")
        pod_status = await run(session)
    assert_never_started(session, pod_status)
    expected = f"{messages.ALREADY_EXISTS}: /mnt/memory/blocked"
    mount = json.loads(container_status(pod_status, MOUNT_CONTAINER)["state"]["terminated"]["message"])
    assert mount["phase"] == "mount_failed" and mount["error"].startswith(expected)
    assert mount["store"] == store
    status = session.status()
    assert status["phase"] == "Failed"
    assert expected in status["message"]
    assert condition(status, "Ready")["reason"] == "MountFailed"  # type: ignore[index]
    assert (session.runner.volume_dir("memory") / "blocked").read_text() == "not a folder\n"  # left alone


async def test_store_that_does_not_exist_fails_the_mount(
    tmp_path: Path, store_server: RunningStoreServer
) -> None:
    store = await make_store(store_server, "gone", {"/a.md": "a\n"})
    session = await new_session(
        tmp_path, store_server, "gone", [(store, "gone", "read_write")], agent_command("--duration", "5")
    )
    async with store_server.admin_client() as admin:
        await admin.delete_store(store)  # the session was minted; the store is gone before the Pod runs
    async with session.runner:
        pod_status = await run(session)
    assert_never_started(session, pod_status)
    mount = json.loads(container_status(pod_status, MOUNT_CONTAINER)["state"]["terminated"]["message"])
    assert mount["phase"] == "mount_failed"
    assert mount["error"].startswith(f"{messages.DOWNLOAD_FAILED}{store}")
    status = session.status()
    assert status["phase"] == "Failed"
    assert f"{messages.DOWNLOAD_FAILED}{store}" in status["message"]


# --------------------------------------------------------------------------------------------------------


def base64_json(payload: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def assert_never_started(session: Session, pod_status: dict[str, Any]) -> None:
    assert pod_status["phase"] == "Failed", session.explain()
    assert container_status(pod_status, SANDBOX_CONTAINER)["state"] == {
        "waiting": {"reason": "PodInitializing"}
    }
    assert container_status(pod_status, SYNC_CONTAINER)["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert session.runner.event_index(SANDBOX_CONTAINER, "started") == -1
    assert not session.runner.host_path(SANDBOX_CONTAINER, "/tmp/agent-report.json").exists()
