"""The AgentEnvironment poll loop against the real store server (its environment API, through the SDK), with
the Kubernetes side in memory: what it creates per claimed session, the concurrency cap, idempotent re-claims,
items it must fail, the environment key missing, refused and rotated, the API unreachable, retention."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer, launch_store_server
from memsync.api.secret import decode_work_secret
from memsync.controller.environment import decisions as d
from memsync.controller.environment.loop import EnvironmentLoop
from memsync.controller.environment.queue import WorkQueue
from memsync.crd.models import sandbox_template, validate_spec
from support.environment_objects import Objects

NS, NAME = "agents", "team-a"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStoreServer]:
    running = launch_store_server(tmp_path_factory.mktemp("env-loop"), extra_args=("--lease-ttl", "2"))
    try:
        yield running
    finally:
        running.stop()


class Admin:
    def __init__(self, server: RunningStoreServer) -> None:
        self.http = httpx.Client(base_url=server.url, headers={"x-api-key": server.admin_key}, timeout=30)

    def environment(self) -> tuple[str, str, str]:
        env = self.http.post("/v1/environments", json={"name": "loop"}).json()
        key = self.http.post(f"/v1/memsync/environments/{env['id']}/keys").json()
        return env["id"], key["key"], key["id"]

    def mint(self, env_id: str, *names: str) -> dict[str, Any]:
        resources = []
        for name in names:
            store = self.http.post("/v1/memory_stores", json={"name": name}).json()
            resources.append({"type": "memory_store", "memory_store_id": store["id"], "access": "read_write"})
        resp = self.http.post("/v1/memsync/sessions", json={"environment_id": env_id, "resources": resources})
        resp.raise_for_status()
        minted: dict[str, Any] = resp.json()
        return minted

    def work(self, env_id: str, work_id: str) -> dict[str, Any]:
        item: dict[str, Any] = self.http.get(f"/v1/environments/{env_id}/work/{work_id}").json()
        return item


@pytest.fixture
def admin(server: RunningStoreServer) -> Iterator[Admin]:
    client = Admin(server)
    yield client
    client.http.close()


def environment(env_id: str, base_url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agents.memsync.dev/v1alpha1",
        "kind": "AgentEnvironment",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-env", "generation": 1},
        "spec": {
            "environmentId": env_id,
            "environmentKeySecretRef": {"name": "env-key", "key": "key"},
            "apiBaseUrl": base_url,
            "template": sandbox_template({"image": "img:1", "command": ["memsync", "session", "run"]}),
            **spec,
        },
    }


def setup(server: RunningStoreServer, admin: Admin, **spec: Any) -> tuple[str, str, Objects, EnvironmentLoop]:
    env_id, key, key_id = admin.environment()
    objects = Objects(environment(env_id, server.url, **spec), {"env-key": {"key": key}})
    return env_id, key_id, objects, EnvironmentLoop(objects, NS, NAME, jitter=lambda: 0.0)


async def test_a_claimed_session_gets_its_secret_and_session_memory_once(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, _, objects, loop = setup(server, admin)
    minted = admin.mint(env_id, "Team Notes", "Runbooks")
    session_id = minted["session"]["id"]
    assert await loop.run_pass() == 0.0
    name = d.object_name(session_id)
    assert set(objects.smems) == {name}
    assert objects.secrets[d.secret_name(session_id)] == {"secret": minted["work_secret"]}
    spec = validate_spec(objects.smems[name]["spec"])
    assert [(s.name, s.effective_mount_path, s.access) for s in spec.stores] == [
        ("Team Notes", "/mnt/memory/team-notes", "read_write"),
        ("Runbooks", "/mnt/memory/runbooks", "read_write"),
    ]
    env_vars = {e["name"]: e for e in spec.template.spec.sandbox["env"]}
    assert env_vars["ANTHROPIC_WORK_ID"]["value"] == minted["work_id"]
    assert env_vars["ANTHROPIC_ENVIRONMENT_ID"]["value"] == env_id
    assert admin.work(env_id, minted["work_id"])["state"] == "starting"  # acknowledged, lease running
    status = objects.env["status"] if objects.env else {}
    assert (status["phase"], status["active"], status["claimed"]) == ("Polling", 1, 1)
    assert minted["work_secret"] not in str(status)
    # the lease lapses (no Pod heartbeats here): the item is handed out again and finds what exists
    await asyncio.sleep(2.5)
    await loop.run_pass()
    assert len(objects.created) == 2  # one Secret, one SessionMemory: the re-claim created nothing
    assert set(objects.smems) == {name}


async def test_the_concurrency_cap_leaves_work_queued(server: RunningStoreServer, admin: Admin) -> None:
    env_id, _, objects, loop = setup(server, admin, maxConcurrentSessions=1)
    first, second = admin.mint(env_id, "Cap One"), admin.mint(env_id, "Cap Two")
    await loop.run_pass()
    assert await loop.run_pass() == 2.0  # at capacity: no poll
    assert len(objects.smems) == 1
    assert admin.work(env_id, second["work_id"])["state"] == "queued"
    objects.finish(d.object_name(first["session"]["id"]), "Succeeded", datetime.now(UTC))
    await loop.run_pass()
    assert d.object_name(second["session"]["id"]) in objects.smems
    status = objects.env["status"] if objects.env else {}
    assert (status["active"], status["succeeded"], status["claimed"]) == (1, 1, 2)


class NoSecretQueue(WorkQueue):
    """The real queue, except that polled items arrive without their secret."""

    async def poll(self, block_ms: int | None = 999) -> dict[str, Any] | None:
        item = await super().poll(block_ms)
        return None if item is None else {**item, "secret": None}


async def test_an_item_with_stores_but_no_secret_is_failed_with_the_documented_message(
    server: RunningStoreServer, admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=NoSecretQueue)
    minted = admin.mint(env_id, "Secretless")
    await loop.run_pass()
    assert objects.smems == {}
    assert admin.work(env_id, minted["work_id"])["state"] == "stopped"
    status = objects.env["status"] if objects.env else {}
    assert status["failed"] == 1
    assert status["lastError"].startswith("the work item carried no sessions token")
    assert "the work item carried no sessions token" in caplog.text


class UnmountableQueue(WorkQueue):
    async def session(self, session_id: str, sessions_token: str | None) -> dict[str, Any]:
        session = await super().session(session_id, sessions_token)
        for res in session["resources"]:
            res["mount_path"] = "/etc/evil"
        return session


async def test_a_store_that_cannot_mount_fails_the_item(server: RunningStoreServer, admin: Admin) -> None:
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=UnmountableQueue)
    minted = admin.mint(env_id, "Evil")
    await loop.run_pass()
    assert objects.smems == {}
    assert admin.work(env_id, minted["work_id"])["state"] == "stopped"
    status = objects.env["status"] if objects.env else {}
    assert "resources[0].mountPath" in status["lastError"]
    assert status["failed"] == 1


async def test_the_environment_key_missing_refused_and_rotated(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, key_id, objects, loop = setup(server, admin)
    key = objects.secrets.pop("env-key")["key"]
    assert await loop.run_pass() == 5.0
    status = objects.env["status"] if objects.env else {}
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", "EnvironmentKeyUnavailable")
    assert "env-key" in status["lastError"]
    objects.secrets["env-key"] = {"key": key}
    admin.http.delete(f"/v1/memsync/environments/{env_id}/keys/{key_id}")  # revoked, Secret not updated yet
    await loop.run_pass()
    status = objects.env["status"] if objects.env else {}
    assert status["phase"] == "Failed"
    assert "refused" in status["lastError"]
    assert key not in str(status)
    new_key = admin.http.post(f"/v1/memsync/environments/{env_id}/keys").json()["key"]
    objects.secrets["env-key"] = {"key": new_key}  # rotated: the next pass polls with the new key
    minted = admin.mint(env_id, "Rotated")
    await loop.run_pass()
    assert d.object_name(minted["session"]["id"]) in objects.smems
    assert (objects.env or {})["status"]["phase"] == "Polling"


async def test_an_unreachable_api_backs_off_and_recovers(server: RunningStoreServer, admin: Admin) -> None:
    _, _, objects, loop = setup(server, admin)
    assert objects.env is not None
    objects.env["spec"]["apiBaseUrl"] = "http://127.0.0.1:9"
    delays = [await loop.run_pass() for _ in range(4)]
    assert delays == [1.0, 2.0, 4.0, 8.0]
    status = objects.env["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Degraded", "PollFailing")
    assert "unreachable" in status["lastError"]
    objects.env["spec"]["apiBaseUrl"] = server.url
    assert await loop.run_pass() == 0.0
    assert objects.env["status"]["phase"] == "Polling"
    assert loop.failures == 0


async def test_finished_session_memories_are_removed_after_their_retention(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, _, objects, loop = setup(server, admin, finishedRetentionSeconds=60)
    old, young = admin.mint(env_id, "Old"), admin.mint(env_id, "Young")
    await loop.run_pass()
    await loop.run_pass()
    for minted in (old, young):  # their Pods stopped them
        admin.http.post(f"/v1/environments/{env_id}/work/{minted['work_id']}/stop", json={"force": True})
    now = datetime.now(UTC)
    old_name, young_name = d.object_name(old["session"]["id"]), d.object_name(young["session"]["id"])
    objects.finish(old_name, "Succeeded", now - timedelta(seconds=61))
    objects.finish(young_name, "Failed", now - timedelta(seconds=5))
    await loop.run_pass()
    assert set(objects.smems) == {young_name}
    assert ("Secret", d.secret_name(old["session"]["id"])) in objects.deleted
    status = objects.env["status"] if objects.env else {}
    assert (status["succeeded"], status["failed"], status["tally"]["retiredSucceeded"]) == (1, 1, 1)


async def test_a_deleted_environment_ends_the_loop(server: RunningStoreServer, admin: Admin) -> None:
    _, _, objects, loop = setup(server, admin)
    objects.env = None
    assert await loop.run_pass() is None


async def test_a_re_claimed_item_adopts_stops_or_replaces_what_exists(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, _, objects, loop = setup(server, admin)
    first = admin.mint(env_id, "Again")
    await loop.run_pass()
    name = d.object_name(first["session"]["id"])
    await asyncio.sleep(2.5)  # no Pod heartbeats: the lease lapses and the item is handed out again
    objects.finish(name, "Succeeded", datetime.now(UTC))
    await loop.run_pass()  # it already ran for this item: the item is stopped, nothing is created
    assert admin.work(env_id, first["work_id"])["state"] == "stopped"
    assert len(objects.created) == 2
    # an earlier item's finished SessionMemory gives way to the new item of the same session
    item = d.WorkItem(
        id="work_later", environment_id=env_id, type="session", session_id=first["session"]["id"], secret="x"
    )
    assert d.on_existing(objects.smems[name], item) == "replace"
    running = {**objects.smems[name], "status": {"phase": "Running"}}
    assert d.on_existing(running, item) == "adopt"


async def test_an_operator_restart_claims_nothing_twice_and_stops_what_finished(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, _, objects, first_loop = setup(server, admin)
    minted = admin.mint(env_id, "Restart")
    await first_loop.run_pass()
    # the Pod heartbeats the item (its runner holds the lease); the operator restarts
    token = decode_work_secret(minted["work_secret"]).sessions_token

    async def pod_heartbeats() -> None:
        last = "NO_HEARTBEAT"
        async with httpx.AsyncClient(
            base_url=server.url, headers={"authorization": f"Bearer {token}"}
        ) as http:
            while True:
                beat = await http.post(
                    f"/v1/environments/{env_id}/work/{minted['work_id']}/heartbeat",
                    params={"expected_last_heartbeat": last},
                )
                last = beat.raise_for_status().json()["last_heartbeat"]
                await asyncio.sleep(0.4)

    pod = asyncio.create_task(pod_heartbeats())
    restarted = EnvironmentLoop(objects, NS, NAME, jitter=lambda: 0.0)
    await restarted.run_pass()
    await restarted.run_pass()
    assert len(objects.created) == 2  # no second Secret or SessionMemory
    status = objects.env["status"] if objects.env else {}
    assert (status["claimed"], status["active"]) == (1, 1)  # the count survived the restart
    pod.cancel()
    # the session's Pod fails to mount (no runner ever ran): the finished SessionMemory's item is stopped
    objects.finish(d.object_name(minted["session"]["id"]), "Failed", datetime.now(UTC))
    await restarted.run_pass()
    assert admin.work(env_id, minted["work_id"])["state"] == "stopped"
