"""``memsync session run`` with a real sync sidecar (in process) against the store server's environment API:
the SDK's runner executes a scripted ``write`` into the mounted store, the session ends, the runner asks the
sidecar for the final sync and flush, and only then is the work item stopped, after the last memory write."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from conftest import RunningStoreServer, launch_store_server
from memsync.agent.commands import Agent, mount, run_sync
from memsync.agent.config import load_config
from memsync.agent.metrics import MetricsServer
from memsync.client import StoreClient
from memsync.contracts import runner
from memsync.contracts.env import StoreEntry
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


async def test_the_item_is_stopped_after_the_final_flush_wrote_the_memory(
    server: RunningStoreServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = httpx.Client(base_url=server.url, headers={"x-api-key": server.admin_key}, timeout=30)
    env = admin.post("/v1/environments", json={"name": "runner"}).json()
    key = admin.post(f"/v1/memsync/environments/{env['id']}/keys").json()["key"]
    store = admin.post("/v1/memory_stores", json={"name": "Notes"}).json()
    shared = admin.post("/v1/memory_stores", json={"name": "Shared"}).json()
    notes_dir = tmp_path / "mnt" / "memory" / "notes"
    shared_dir = tmp_path / "mnt" / "memory" / "shared"
    script = [
        {"type": "agent.tool_use", "id": "toolu_w", "name": "write",
         "input": {"file_path": str(notes_dir / "hello.md"), "content": "hello memory\n"}},
        {"type": "agent.tool_use", "id": "toolu_ro", "name": "write",
         "input": {"file_path": str(shared_dir / "nope.md"), "content": "x"}},
        {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}},
        {"type": "session.status_terminated"},
    ]  # fmt: skip
    minted = admin.post(
        "/v1/memsync/sessions",
        json={
            "environment_id": env["id"],
            "resources": [
                {"type": "memory_store", "memory_store_id": store["id"]},
                {"type": "memory_store", "memory_store_id": shared["id"], "access": "read_only"},
            ],
            "script": script,
        },
    ).json()
    as_env = {"authorization": f"Bearer {key}"}
    item = httpx.get(f"{server.url}/v1/environments/{env['id']}/work/poll", headers=as_env).json()
    httpx.post(
        f"{server.url}/v1/environments/{env['id']}/work/{item['id']}/ack", headers=as_env
    ).raise_for_status()

    # the sidecar: mount, then sync with an interval far beyond the test, so only the final flush uploads
    secret = item["secret"]
    stores = [
        {"memory_store_id": store["id"], "name": "Notes", "mount_path": "/mnt/memory/notes"},
        {
            "memory_store_id": shared["id"],
            "name": "Shared",
            "mount_path": "/mnt/memory/shared",
            "access": "read_only",
        },
    ]
    cfg = load_config(
        stores=json.dumps(stores),
        interval=3600,
        work_secret=secret,
        test_root=str(tmp_path),
        state_dir="/var/lib/memsync",
        termination_log="/dev/termination-log",
        metrics_port=0,
    )
    (tmp_path / "dev").mkdir()
    client = StoreClient.from_work_secret(secret)
    await mount(cfg, client=client)
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_ready(agent: Agent, metrics: MetricsServer | None) -> None:
        assert metrics is not None
        ready.set_result(metrics.port)

    sidecar = asyncio.create_task(run_sync(cfg, client=client, install_signals=False, on_ready=on_ready))
    port = await asyncio.wait_for(ready, 30)

    monkeypatch.setenv(runner.WORK_SECRET, secret)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = RunnerConfig(
        work_id=item["id"],
        environment_id=env["id"],
        session_id=minted["session"]["id"],
        stores=(
            StoreEntry(memory_store_id=store["id"], name="Notes", mount_path=str(notes_dir)),
            StoreEntry(
                memory_store_id=shared["id"], name="Shared", mount_path=str(shared_dir), access="read_only"
            ),
        ),
        sidecar_url=f"http://127.0.0.1:{port}",
        workdir=tmp_path,
    )
    await asyncio.wait_for(
        run_session(config, client=anthropic.AsyncAnthropic(base_url=server.url), max_idle=5), timeout=90
    )
    assert await asyncio.wait_for(sidecar, 30) == 0
    await client.aclose()

    # the memory reached the store, and the item was stopped after its last version was written
    memories = admin.get(f"/v1/memory_stores/{store['id']}/memories", params={"view": "full"}).json()["data"]
    assert [(m["path"], m["content"]) for m in memories] == [("/hello.md", "hello memory\n")]
    versions = admin.get(f"/v1/memory_stores/{store['id']}/memory_versions").json()["data"]
    work = admin.get(f"/v1/environments/{env['id']}/work/{item['id']}").json()
    assert work["state"] == "stopped"
    assert max(_ts(v["created_at"]) for v in versions) < _ts(work["stopped_at"])
    assert not (shared_dir / "nope.md").exists()
    history = admin.get(f"/v1/sessions/{minted['session']['id']}/events").json()["data"]
    results = {e["tool_use_id"]: e for e in history if e["type"] == "user.tool_result"}
    assert results["toolu_w"]["is_error"] is False
    assert "read-only" in results["toolu_ro"]["content"][0]["text"]
    report = json.loads((tmp_path / "dev" / "termination-log").read_text())
    assert report["complete"] is True
    admin.close()


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
