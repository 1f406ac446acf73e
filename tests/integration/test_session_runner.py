"""``memsync session run`` with a real sync sidecar (in process) against the store server's environment API:
the SDK's runner executes a scripted ``write`` into the mounted store, the session ends, the runner asks the
sidecar for the final sync and flush, and only then is the work item stopped, after the last memory write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer, launch_store_server
from memsync import pid1
from memsync.agent.commands import SyncAgent, mount, run_sync
from memsync.agent.config import load_config
from memsync.agent.metrics import MetricsServer
from memsync.client import StoreClient
from memsync.contracts import runner
from memsync.contracts.stores import StoreEntry
from memsync.session.runner import RunnerConfig, RunnerConfigError, config_from_env, run_session


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStoreServer]:
    running = launch_store_server(tmp_path_factory.mktemp("runner"), extra_args=("--lease-ttl", "4"))
    try:
        yield running
    finally:
        running.stop()


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Session:
    """A session minted into a new environment and claimed, with its "Pod" (mount, sidecar, runner) in this
    process: two stores, Notes (read-write) and Shared (read-only), under ``root``/mnt/memory."""

    def __init__(self, server: RunningStoreServer, root: Path) -> None:
        self.server = server
        self.root = root
        self.admin = httpx.Client(base_url=server.url, headers={"x-api-key": server.admin_key}, timeout=30)
        self.notes_dir = root / "mnt" / "memory" / "notes"
        self.shared_dir = root / "mnt" / "memory" / "shared"

    def mint(self, script: list[dict[str, Any]]) -> None:
        self.env = self.admin.post("/v1/environments", json={"name": "runner"}).json()
        key = self.admin.post(f"/v1/memsync/environments/{self.env['id']}/keys").json()["key"]
        self.store = self.admin.post("/v1/memory_stores", json={"name": "Notes"}).json()
        self.shared = self.admin.post("/v1/memory_stores", json={"name": "Shared"}).json()
        resources = [
            {"type": "memory_store", "memory_store_id": self.store["id"]},
            {"type": "memory_store", "memory_store_id": self.shared["id"], "access": "read_only"},
        ]
        body = {"environment_id": self.env["id"], "resources": resources, "script": script}
        self.minted = self.admin.post("/v1/memsync/sessions", json=body).json()
        as_env = {"authorization": f"Bearer {key}"}
        base = f"{self.server.url}/v1/environments/{self.env['id']}/work"
        self.item = httpx.get(f"{base}/poll", headers=as_env).json()
        httpx.post(f"{base}/{self.item['id']}/ack", headers=as_env).raise_for_status()

    async def start_sidecar(self) -> int:
        """Mount, then sync with an interval far beyond the test, so only the final flush uploads."""
        stores = [
            {"memory_store_id": self.store["id"], "name": "Notes", "mount_path": "/mnt/memory/notes"},
            {"memory_store_id": self.shared["id"], "name": "Shared", "mount_path": "/mnt/memory/shared",
             "access": "read_only"},
        ]  # fmt: skip
        cfg = load_config(
            stores=json.dumps(stores),
            interval=3600,
            work_secret=self.item["secret"],
            test_root=str(self.root),
            state_dir="/var/lib/memsync",
            termination_log="/dev/termination-log",
            metrics_port=0,
        )
        (self.root / "dev").mkdir()
        self.client = StoreClient.from_work_secret(self.item["secret"])
        await mount(cfg, client=self.client)
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_ready(agent: SyncAgent, metrics: MetricsServer | None) -> None:
            assert metrics is not None
            ready.set_result(metrics.port)

        self.sidecar = asyncio.create_task(
            run_sync(cfg, client=self.client, install_signals=False, on_ready=on_ready)
        )
        return await asyncio.wait_for(ready, 30)

    def runner_config(self, port: int) -> RunnerConfig:
        return RunnerConfig(
            work_id=self.item["id"],
            environment_id=self.env["id"],
            session_id=self.minted["session"]["id"],
            stores=(
                StoreEntry(memory_store_id=self.store["id"], name="Notes", mount_path=str(self.notes_dir)),
                StoreEntry(
                    memory_store_id=self.shared["id"],
                    name="Shared",
                    mount_path=str(self.shared_dir),
                    access="read_only",
                ),
            ),
            sidecar_url=f"http://127.0.0.1:{port}",
            workdir=self.root,
        )

    async def run(self, max_idle: float = 5) -> None:
        port = await self.start_sidecar()
        await run_session(
            self.runner_config(port),
            base_url=self.server.url,
            max_idle=max_idle,
            work_secret=self.item["secret"],
        )

    async def finish(self) -> int:
        code = await asyncio.wait_for(self.sidecar, 30)
        await self.client.aclose()
        return code

    def memories(self) -> list[tuple[str, str]]:
        data = self.admin.get(
            f"/v1/memory_stores/{self.store['id']}/memories", params={"view": "full"}
        ).json()
        return [(m["path"], m["content"]) for m in data["data"]]

    def work(self) -> dict[str, Any]:
        work: dict[str, Any] = self.admin.get(
            f"/v1/environments/{self.env['id']}/work/{self.item['id']}"
        ).json()
        return work

    def history(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.admin.get(
            f"/v1/sessions/{self.minted['session']['id']}/events"
        ).json()["data"]
        return events


def write(tool_id: str, path: Path, content: str) -> dict[str, Any]:
    return {"type": "agent.tool_use", "id": tool_id, "name": "write",
            "input": {"file_path": str(path), "content": content}}  # fmt: skip


END = [
    {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}},
    {"type": "session.status_terminated"},
]


async def test_the_item_is_stopped_after_the_final_flush_wrote_the_memory(
    tmp_path: Path, server: RunningStoreServer
) -> None:
    session = Session(server, tmp_path)
    session.mint([write("toolu_w", session.notes_dir / "hello.md", "hello memory\n"),
                  write("toolu_ro", session.shared_dir / "nope.md", "x"), *END])  # fmt: skip
    await asyncio.wait_for(session.run(), timeout=90)
    assert await session.finish() == 0

    # the memory reached the store, and the item was stopped after its last version was written
    assert session.memories() == [("/hello.md", "hello memory\n")]
    versions = session.admin.get(f"/v1/memory_stores/{session.store['id']}/memory_versions").json()["data"]
    work = session.work()
    assert work["state"] == "stopped"
    assert max(_ts(v["created_at"]) for v in versions) < _ts(work["stopped_at"])
    assert not (session.shared_dir / "nope.md").exists()
    results = {e["tool_use_id"]: e for e in session.history() if e["type"] == "user.tool_result"}
    assert results["toolu_w"]["is_error"] is False
    assert "read-only" in results["toolu_ro"]["content"][0]["text"]
    report = json.loads((tmp_path / "dev" / "termination-log").read_text())
    assert report["complete"] is True


async def test_a_lease_taken_away_mid_session_ends_the_runner_gracefully_with_the_flush(
    tmp_path: Path, server: RunningStoreServer
) -> None:
    session = Session(server, tmp_path)
    # a call for another client's tool: it stays pending, so the session keeps running until the lease ends
    busy = {"type": "agent.custom_tool_use", "id": "toolu_busy", "name": "someone_elses_tool", "input": {}}
    session.mint([write("toolu_w", session.notes_dir / "kept.md", "kept\n"), busy, *END])
    running = asyncio.create_task(session.run(max_idle=60))
    while not any(e.get("tool_use_id") == "toolu_w" for e in session.history()):
        await asyncio.sleep(0.1)
    started = asyncio.get_running_loop().time()
    # the lease is taken away (here: the item stopped under the runner); its next heartbeat learns it
    session.admin.post(
        f"/v1/environments/{session.env['id']}/work/{session.item['id']}/stop", json={"force": True}
    ).raise_for_status()
    await asyncio.wait_for(running, timeout=40)
    assert asyncio.get_running_loop().time() - started < 30
    assert await session.finish() == 0
    assert session.memories() == [("/kept.md", "kept\n")]  # the final flush still saved the write


def test_the_runner_environment_is_checked_by_name(tmp_path: Path) -> None:
    with pytest.raises(RunnerConfigError, match="ANTHROPIC_WORK_ID, ANTHROPIC_WORK_SECRET must be set"):
        config_from_env({runner.ENVIRONMENT_ID: "env_1", runner.SESSION_ID: "sesn_1"}, tmp_path)
    base: dict[str, Any] = {
        runner.WORK_ID: "work_1",
        runner.ENVIRONMENT_ID: "env_1",
        runner.SESSION_ID: "sesn_1",
        runner.WORK_SECRET: "s",
    }
    with pytest.raises(RunnerConfigError, match="MEMSYNC_STORES is not the stores JSON"):
        config_from_env({**base, runner.STORES: "{"}, tmp_path)
    stores = json.dumps(
        [{"memory_store_id": "memstore_a", "mount_path": "/mnt/memory/a", "access": "read_only"}]
    )
    config = config_from_env({**base, runner.STORES: stores, runner.SIDECAR_PORT: "9477"}, tmp_path)
    assert config.roots == [Path("/mnt/memory/a")]
    assert config.read_only_roots == [Path("/mnt/memory/a")]
    assert config.sidecar_url == "http://127.0.0.1:9477"
    with pytest.raises(RunnerConfigError, match="MEMSYNC_METRICS_PORT must be a port number"):
        config_from_env({**base, runner.SIDECAR_PORT: "x"}, tmp_path)
    mapped = config_from_env({**base, runner.STORES: stores, "MEMSYNC_TEST_ROOT": "/tmp/r"}, tmp_path)
    assert mapped.roots == [Path("/tmp/r/mnt/memory/a")]


async def test_sigterm_ends_the_session_with_the_final_flush_then_the_item_stopped(
    tmp_path: Path, server: RunningStoreServer
) -> None:
    """The runner is its sandbox's PID 1 (``memsync session run``): SIGTERM (the Pod deleted, drained or
    past its deadline) ends the session the way its own end does: the sidecar's final flush saves the write,
    then the item is stopped, and the runner exits 143."""
    session = Session(server, tmp_path)
    busy = {"type": "agent.custom_tool_use", "id": "toolu_busy", "name": "someone_elses_tool", "input": {}}
    session.mint([write("toolu_w", session.notes_dir / "kept.md", "kept\n"), busy, *END])

    async def serve() -> int:
        await session.run(max_idle=60)
        return 0

    running = asyncio.create_task(pid1.until_signalled(serve, what="the session runner"))
    while not any(e.get("tool_use_id") == "toolu_w" for e in session.history()):
        await asyncio.sleep(0.1)
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(running, timeout=40) == 143
    assert await session.finish() == 0
    assert session.memories() == [("/kept.md", "kept\n")]
    versions = session.admin.get(f"/v1/memory_stores/{session.store['id']}/memory_versions").json()["data"]
    work = session.work()
    assert work["state"] == "stopped"
    assert max(_ts(v["created_at"]) for v in versions) < _ts(work["stopped_at"])
