"""The store server's environment API, driven by the official ``anthropic`` SDK as the client where it can be:
its poller claims work, its EnvironmentWorker serves an item (heartbeat, session tool runner, force-stop)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.lib.environments import EnvironmentWorker
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401

from conftest import RunningStoreServer, launch_on_backend
from memsync.api.secret import decode_work_secret

LEASE_TTL = 4


pytestmark = pytest.mark.both_backends


@pytest.fixture(scope="module")
def server(
    store_backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStoreServer]:
    running = launch_on_backend(
        store_backend,
        request,
        tmp_path_factory.mktemp(f"env-server-{store_backend}"),
        ("--lease-ttl", str(LEASE_TTL)),
    )
    try:
        yield running
    finally:
        running.stop()


class Api:
    def __init__(self, server: RunningStoreServer) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=30.0)

    def admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.http.request(method, path, headers={"x-api-key": self.server.admin_key}, **kw)

    def bearer(self, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.http.request(method, path, headers={"authorization": f"Bearer {token}"}, **kw)

    def environment(self) -> tuple[str, str, str]:
        env = self.admin("POST", "/v1/environments", json={"name": "test env"}).json()
        key = self.admin("POST", f"/v1/memsync/environments/{env['id']}/keys").json()
        return env["id"], key["key"], key["id"]

    def store(self, name: str) -> str:
        resp = self.admin("POST", "/v1/memory_stores", json={"name": name})
        resp.raise_for_status()
        store_id: str = resp.json()["id"]
        return store_id

    def mint(
        self, env_id: str, script: list[dict[str, Any]] | None = None, stores: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "environment_id": env_id,
            "resources": [{"type": "memory_store", "memory_store_id": s} for s in stores],
        }
        if script is not None:
            body["script"] = script
        resp = self.admin("POST", "/v1/memsync/sessions", json=body)
        resp.raise_for_status()
        minted: dict[str, Any] = resp.json()
        return minted


@pytest.fixture
def api(server: RunningStoreServer) -> Iterator[Api]:
    client = Api(server)
    try:
        yield client
    finally:
        client.http.close()


def sdk(server: RunningStoreServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key=None, max_retries=0)


async def claim_one(server: RunningStoreServer, env_id: str, key: str) -> Any:
    client = sdk(server)
    poller = client.beta.environments.work.poller(
        environment_id=env_id, environment_key=key, auto_stop=False, drain=True, block_ms=None
    )
    async for item in poller:
        return item
    return None


async def test_the_sdk_poller_claims_a_minted_session_with_its_secret(
    server: RunningStoreServer, api: Api
) -> None:
    env_id, key, _ = api.environment()
    minted = api.mint(env_id)
    item = await claim_one(server, env_id, key)
    assert item is not None
    assert item.id == minted["work_id"]
    assert item.data.type == "session"
    assert item.data.id == minted["session"]["id"]
    assert item.secret == minted["work_secret"]
    assert decode_work_secret(item.secret).sessions_token.startswith("sk-ant-req-")
    # the poller acknowledged it: starting, out of the queue, and the secret is no longer answered
    listed = api.bearer(key, "GET", f"/v1/environments/{env_id}/work").json()["data"]
    assert [(w["id"], w["state"], w["secret"]) for w in listed] == [(item.id, "starting", None)]
    assert await claim_one(server, env_id, key) is None
    stats = api.bearer(key, "GET", f"/v1/environments/{env_id}/work/stats").json()
    assert (stats["depth"], stats["pending"]) == (0, 0)


async def test_an_unacknowledged_poll_is_reclaimed_only_after_the_window(
    server: RunningStoreServer, api: Api
) -> None:
    env_id, key, _ = api.environment()
    minted = api.mint(env_id)
    path = f"/v1/environments/{env_id}/work/poll"
    first = api.bearer(key, "GET", path).json()
    assert first["id"] == minted["work_id"]
    assert first["state"] == "queued"
    assert api.bearer(key, "GET", path).json() is None  # within the 5 s default window
    stats = api.bearer(key, "GET", f"/v1/environments/{env_id}/work/stats").json()
    assert (stats["depth"], stats["pending"]) == (0, 1)
    again = api.bearer(key, "GET", path, params={"reclaim_older_than_ms": 0}).json()
    assert again["id"] == first["id"]
    assert again["secret"] == minted["work_secret"]


def test_a_long_poll_returns_work_minted_while_it_waits(server: RunningStoreServer, api: Api) -> None:
    env_id, key, _ = api.environment()
    path = f"/v1/environments/{env_id}/work/poll"
    empty = api.bearer(key, "GET", path, params={"block_ms": 50})
    assert empty.status_code == 200
    assert empty.text == "null"
    result: dict[str, Any] = {}

    def wait() -> None:
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            result["work"] = http.get(
                path, params={"block_ms": 999}, headers={"authorization": f"Bearer {key}"}
            ).json()

    import threading

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    minted = api.mint(env_id)
    waiter.join()
    assert result["work"] is not None
    assert result["work"]["id"] == minted["work_id"]
    assert api.bearer(key, "GET", path, params={"block_ms": 0}).status_code == 400


def test_keys_are_per_environment_and_revocable(server: RunningStoreServer, api: Api) -> None:
    env_a, key_a, key_a_id = api.environment()
    env_b, key_b, _ = api.environment()
    minted = api.mint(env_a)
    assert api.bearer(key_b, "GET", f"/v1/environments/{env_a}/work/poll").status_code == 403
    token = decode_work_secret(minted["work_secret"]).sessions_token
    assert api.bearer(token, "GET", f"/v1/environments/{env_a}/work/poll").status_code == 403
    assert api.admin("DELETE", f"/v1/memsync/environments/{env_a}/keys/{key_a_id}").status_code == 200
    refused = api.bearer(key_a, "GET", f"/v1/environments/{env_a}/work/poll")
    assert refused.status_code == 401
    assert key_a not in refused.text
    assert api.bearer(key_b, "GET", f"/v1/environments/{env_b}/work/poll").json() is None
    # a session cannot be minted into an unknown environment; nothing is left behind
    assert api.admin("POST", "/v1/memsync/sessions", json={"environment_id": "env_nope"}).status_code == 404


def _beat(api: Api, cred: str, env_id: str, work_id: str, expected: str) -> httpx.Response:
    return api.bearer(
        cred,
        "POST",
        f"/v1/environments/{env_id}/work/{work_id}/heartbeat",
        params={"expected_last_heartbeat": expected},
    )


async def test_heartbeats_hold_the_lease_and_a_lapsed_lease_requeues(
    server: RunningStoreServer, api: Api
) -> None:
    env_id, key, _ = api.environment()
    minted = api.mint(env_id)
    item = await claim_one(server, env_id, key)
    token = decode_work_secret(item.secret).sessions_token
    first = _beat(api, token, env_id, item.id, "NO_HEARTBEAT").json()
    assert first["type"] == "work_heartbeat"
    assert (first["state"], first["lease_extended"], first["ttl_seconds"]) == ("active", True, LEASE_TTL)
    # a second holder starting over is refused with the lease as the server holds it
    stale = _beat(api, token, env_id, item.id, "NO_HEARTBEAT")
    assert stale.status_code == 412
    details = stale.json()["error"]["details"]
    assert details["current_state"]["last_heartbeat"] == first["last_heartbeat"]
    assert details["current_state"]["lease_extended"] is False
    second = _beat(api, token, env_id, item.id, first["last_heartbeat"]).json()
    assert second["last_heartbeat"] != first["last_heartbeat"]
    # no heartbeat for a TTL: the item is queued again, handed out with its secret, the old holder refused
    await asyncio.sleep(LEASE_TTL + 0.5)
    again = api.bearer(key, "GET", f"/v1/environments/{env_id}/work/poll").json()
    assert again["id"] == item.id
    assert again["secret"] == minted["work_secret"]
    assert _beat(api, token, env_id, item.id, second["last_heartbeat"]).status_code == 412


async def test_stop_graceful_then_forced_and_a_second_stop_is_a_final_409(
    server: RunningStoreServer, api: Api
) -> None:
    env_id, key, _ = api.environment()
    api.mint(env_id)
    item = await claim_one(server, env_id, key)
    token = decode_work_secret(item.secret).sessions_token
    beat = _beat(api, token, env_id, item.id, "NO_HEARTBEAT").json()
    stop = f"/v1/environments/{env_id}/work/{item.id}/stop"
    assert api.bearer(key, "POST", stop, json={}).json()["state"] == "stopping"
    signal = _beat(api, token, env_id, item.id, beat["last_heartbeat"]).json()
    assert (signal["state"], signal["lease_extended"]) == ("stopping", False)
    done = api.bearer(token, "POST", stop, json={"force": True}).json()
    assert done["state"] == "stopped"
    assert done["stopped_at"] is not None
    again = api.bearer(token, "POST", stop, json={"force": True})
    assert again.status_code == 409
    assert again.headers["x-should-retry"] == "false"
    retrieved = api.admin("GET", f"/v1/environments/{env_id}/work/{item.id}").json()
    assert retrieved["state"] == "stopped"


async def test_the_sdk_worker_runs_a_scripted_write_and_stops_the_item(
    server: RunningStoreServer, api: Api, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env_id, key, _ = api.environment()
    root = tmp_path / "memory" / "notes"
    readonly = tmp_path / "memory" / "shared"
    root.mkdir(parents=True)
    readonly.mkdir(parents=True)
    script = [
        {
            "type": "agent.tool_use",
            "id": "toolu_1",
            "name": "write",
            "input": {"file_path": str(root / "hello.txt"), "content": "hi\n"},
        },
        {
            "type": "agent.tool_use",
            "id": "toolu_2",
            "name": "write",
            "input": {"file_path": str(readonly / "nope.txt"), "content": "x"},
        },
        {
            "type": "agent.tool_use",
            "id": "toolu_3",
            "name": "write",
            "input": {"file_path": "/etc/memsync-escape.txt", "content": "x"},
        },
        {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}},
        {"type": "session.status_terminated"},
    ]
    minted = api.mint(env_id, script)
    item = await claim_one(server, env_id, key)

    def tools(ctx: AgentToolContext) -> Any:
        ctx.allowed_roots = [root, readonly]
        ctx.read_only_roots = [readonly]
        return beta_agent_toolset_20260401(ctx)

    worker = EnvironmentWorker(
        sdk(server), workdir=tmp_path, memory_sync_interval=None, max_idle=5, tools=tools
    )
    caplog.set_level(logging.INFO, logger="anthropic")
    await asyncio.wait_for(
        worker.handle_item(
            work_id=item.id, environment_id=env_id, session_id=item.data.id, work_secret=item.secret
        ),
        timeout=60,
    )
    assert (root / "hello.txt").read_text() == "hi\n"
    assert not (readonly / "nope.txt").exists()
    assert not Path("/etc/memsync-escape.txt").exists()
    session_id = minted["session"]["id"]
    history = api.admin("GET", f"/v1/sessions/{session_id}/events").json()["data"]
    results = {e["tool_use_id"]: e for e in history if e["type"] == "user.tool_result"}
    assert results["toolu_1"]["is_error"] is False
    assert "wrote 3 bytes" in results["toolu_1"]["content"][0]["text"]
    assert results["toolu_2"]["is_error"] is True
    assert "read-only" in results["toolu_2"]["content"][0]["text"]
    assert results["toolu_3"]["is_error"] is True
    assert [e["type"] for e in history][-2:] == ["session.status_idle", "session.status_terminated"]
    work = api.admin("GET", f"/v1/environments/{env_id}/work/{item.id}").json()
    assert work["state"] == "stopped"
    assert work["started_at"] is not None
    session = api.bearer(key, "GET", f"/v1/sessions/{session_id}").json()
    assert session["status"] == "terminated"


def test_a_worker_may_post_only_user_events(server: RunningStoreServer, api: Api) -> None:
    env_id, _, _ = api.environment()
    minted = api.mint(env_id)
    token = decode_work_secret(minted["work_secret"]).sessions_token
    path = f"/v1/sessions/{minted['session']['id']}/events"
    refused = api.bearer(token, "POST", path, json={"events": [{"type": "agent.tool_use", "id": "x"}]})
    assert refused.status_code == 400
    assert "user.*" in refused.json()["error"]["message"]
    posted = api.bearer(token, "POST", path, json={"events": [{"type": "user.message", "content": []}]})
    assert posted.status_code == 200
    other = api.mint(env_id)
    assert api.bearer(token, "GET", f"/v1/sessions/{other['session']['id']}/events").status_code == 404
