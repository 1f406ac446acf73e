"""The AgentEnvironment poll loop against the real store server (its environment API, through the SDK), with
the Kubernetes side in memory: what it creates per claimed session, the concurrency cap, idempotent re-claims,
items it must fail, the environment key missing, refused and rotated, the API unreachable, retention."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import anthropic
import httpx
import pytest
from prometheus_client import REGISTRY

from conftest import RunningStoreServer, launch_store_server
from memsync.api.secret import decode_work_secret
from memsync.controller.environment import decisions as d
from memsync.controller.environment.loop import EnvironmentLoop
from memsync.controller.environment.queue import QueueError, WorkQueue
from memsync.crd.agentenv import STATUS_HELD_HEARTBEATS, validate_environment_spec
from memsync.crd.models import sandbox_template, validate_spec
from memsync.session.takeover import runner_http_client
from support.environment_objects import Objects

NS, NAME = "agents", "team-a"
LEASE_TTL = 2
FIRST_HEARTBEAT_S = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStoreServer]:
    running = launch_store_server(
        tmp_path_factory.mktemp("env-loop"),
        extra_args=("--lease-ttl", str(LEASE_TTL), "--first-heartbeat-window", str(FIRST_HEARTBEAT_S)),
    )
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


async def runner_first_heartbeat(
    server: RunningStoreServer, env_id: str, work_id: str, token: str, chain: list[str] | None = None
) -> int:
    """The first heartbeat of a Pod's runner, as the SDK sends it (``NO_HEARTBEAT``), through the runner's
    takeover transport; the HTTP status the SDK ends up seeing (``chain`` gets the value it answered)."""
    http = runner_http_client(work_id)
    client = anthropic.AsyncAnthropic(base_url=server.url, auth_token=token, http_client=http)
    try:
        beat = await client.beta.environments.work.heartbeat(
            work_id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
        )
    except anthropic.APIStatusError as exc:
        return exc.status_code
    finally:
        await client.close()
    if chain is not None:
        chain.append(beat.last_heartbeat)
    return 200


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


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
    # acknowledged and heartbeated by the operator at once (its holder's first beat, a task of its own):
    # the lease does not wait for the Pod
    await eventually(lambda: admin.work(env_id, minted["work_id"])["state"] == "active")
    status = objects.env["status"] if objects.env else {}
    assert (status["phase"], status["active"], status["claimed"]) == ("Polling", 1, 1)
    assert minted["work_secret"] not in str(status)
    # no Pod takes over here: the operator keeps holding, the item is not handed out again
    await asyncio.sleep(LEASE_TTL + 1)
    await loop.run_pass()
    assert len(objects.created) == 2  # one Secret, one SessionMemory
    assert set(objects.smems) == {name}
    assert admin.work(env_id, minted["work_id"])["state"] == "active"
    assert loop.holder.holding(minted["work_id"])
    await loop.aclose()


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
    assert 1.0 <= await loop.run_pass() <= 2.0  # no work: the idle pause
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
    # the operator's next heartbeats see the items stopped and let them go
    await eventually(lambda: len(loop.holder.outcomes) == 2)
    assert loop.holder.outcomes == {old["work_id"]: "stopping", young["work_id"]: "stopping"}
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


async def test_a_re_delivered_item_is_served_to_its_end(server: RunningStoreServer, admin: Admin) -> None:
    env_id, _, objects, loop = setup(server, admin)
    first = admin.mint(env_id, "Again")
    await loop.run_pass()
    name = d.object_name(first["session"]["id"])
    work_id = first["work_id"]
    token = decode_work_secret(first["work_secret"]).sessions_token
    # the Pod's runner takes the lease over, then stops heartbeating (its node is cut off)
    assert await runner_first_heartbeat(server, env_id, work_id, token) == 200
    await asyncio.sleep(LEASE_TTL + 1.5)  # the lease lapses: the item is queued again
    assert admin.work(env_id, work_id)["state"] == "queued"
    await loop.run_pass()  # re-claimed: acknowledged and held; the running SessionMemory is waited for
    await eventually(lambda: admin.work(env_id, work_id)["state"] == "active")  # the holder's first beat
    assert set(loop.claims.pending) == {work_id}
    objects.finish(name, "Succeeded", datetime.now(UTC))  # the old Pod lost the lease and ended
    await loop.run_pass()  # not stopped: the finished SessionMemory makes way for a new one
    assert name not in objects.smems
    await loop.run_pass()
    assert name in objects.smems and d.is_active(objects.smems[name])
    assert d.work_id_of(objects.smems[name]) == work_id
    assert loop.claims.pending == {}
    assert admin.work(env_id, work_id)["state"] == "active"  # still held, for the new Pod to take over
    assert await runner_first_heartbeat(server, env_id, work_id, token) == 200
    await eventually(lambda: work_id in loop.holder.outcomes)
    assert loop.holder.outcomes[work_id] == "taken_over"
    await loop.aclose()


def test_what_exists_for_a_session_is_adopted_replaced_or_done() -> None:
    item = d.WorkItem(id="work_1", environment_id="env", type="session", session_id="sesn_1", secret="x")
    smem = {"metadata": {"name": "s", "annotations": {"agents.memsync.dev/work-id": "work_1"}}}
    running = {**smem, "status": {"phase": "Running"}}
    finished = {**smem, "status": {"phase": "Succeeded"}}
    assert d.on_existing(running, item) == "adopt"
    assert d.on_existing(finished, item) == "done"  # it had run for this item before the item came back
    assert d.on_existing(finished, item, adopted=True) == "replace"  # it ended after the item came back
    later = d.WorkItem(id="work_2", environment_id="env", type="session", session_id="sesn_1", secret="x")
    assert d.on_existing(finished, later) == "replace"


async def test_an_operator_restart_claims_nothing_twice_and_stops_what_finished(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, _, objects, first_loop = setup(server, admin)
    minted = admin.mint(env_id, "Restart")
    await first_loop.run_pass()
    token = decode_work_secret(minted["work_secret"]).sessions_token
    await first_loop.aclose()  # the operator stops; the Pod's runner took the lease over
    assert await runner_first_heartbeat(server, env_id, minted["work_id"], token) == 200
    path = f"/v1/environments/{env_id}/work/{minted['work_id']}/heartbeat"

    async def pod_heartbeats() -> None:
        async with httpx.AsyncClient(
            base_url=server.url, headers={"authorization": f"Bearer {token}"}
        ) as http:
            probe = await http.post(path, params={"expected_last_heartbeat": "NO_HEARTBEAT"})
            last = probe.json()["error"]["details"]["current_state"]["last_heartbeat"]  # the runner's
            while True:
                beat = await http.post(path, params={"expected_last_heartbeat": last})
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


def handovers() -> float:
    return REGISTRY.get_sample_value("memsync_operator_environment_handover_seconds_count") or 0.0


async def test_the_operator_holds_the_lease_past_the_first_heartbeat_window_and_hands_it_over(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, key, _ = admin.environment()
    # the window is real: an item acknowledged and not heartbeated is queued again after it
    unheld = admin.mint(env_id, "Unheld")
    raw = httpx.get(
        f"{server.url}/v1/environments/{env_id}/work/poll", headers={"authorization": f"Bearer {key}"}
    ).json()
    httpx.post(
        f"{server.url}/v1/environments/{env_id}/work/{raw['id']}/ack",
        headers={"authorization": f"Bearer {key}"},
    ).raise_for_status()
    await asyncio.sleep(FIRST_HEARTBEAT_S + 0.5)
    assert admin.work(env_id, unheld["work_id"])["state"] == "queued"
    admin.http.post(f"/v1/environments/{env_id}/work/{unheld['work_id']}/stop", json={"force": True})

    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    loop = EnvironmentLoop(objects, NS, NAME, jitter=lambda: 0.0)
    minted = admin.mint(env_id, "Slow Pod")
    before = handovers()
    await loop.run_pass()
    await asyncio.sleep(FIRST_HEARTBEAT_S + LEASE_TTL + 1)  # the Pod is slower than the window and the TTL
    item = admin.work(env_id, minted["work_id"])
    assert item["state"] == "active"  # held by the operator, never queued again
    assert item["acknowledged_at"] is not None
    token = decode_work_secret(minted["work_secret"]).sessions_token
    chain: list[str] = []
    assert await runner_first_heartbeat(server, env_id, minted["work_id"], token, chain) == 200
    path = f"/v1/environments/{env_id}/work/{minted['work_id']}/heartbeat"
    async with httpx.AsyncClient(base_url=server.url, headers={"authorization": f"Bearer {token}"}) as http:

        async def runner_beats() -> None:  # the runner's chain, at its own pace, never broken
            while True:
                await asyncio.sleep(0.5)
                beat = await http.post(path, params={"expected_last_heartbeat": chain[-1]})
                chain.append(beat.raise_for_status().json()["last_heartbeat"])

        runner = asyncio.create_task(runner_beats())
        # the operator's next heartbeat is refused: the runner holds the lease, the operator lets it go
        await eventually(lambda: minted["work_id"] in loop.holder.outcomes)
        assert loop.holder.outcomes[minted["work_id"]] == "taken_over"
        assert handovers() == before + 1
        await asyncio.sleep(2.0)  # no double owner: the runner's chain goes on, nobody else beats
        assert not runner.done()
        runner.cancel()
    assert len(chain) >= 4
    await loop.aclose()


async def test_a_new_leader_holds_the_old_leaders_items_without_a_lapse_then_hands_them_over(
    server: RunningStoreServer, admin: Admin
) -> None:
    """The operator's leader holds an item's lease while its Pod is slow, then stops (a takeover: its holds
    are released, never cleared); the next leader's loop, on the same objects, resumes the hold from the
    value the environment's status recorded. The lease outlives the old leader by many TTLs, never queued
    again, and the runner still takes it over from the new leader."""
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    minted = admin.mint(env_id, "Handed Over")
    work_id = minted["work_id"]
    first = EnvironmentLoop(objects, NS, NAME, jitter=lambda: 0.0)
    await first.run_pass()

    def held() -> dict[str, str]:
        return dict(((objects.env or {}).get("status") or {}).get(STATUS_HELD_HEARTBEATS) or {})

    await eventually(lambda: work_id in held())
    held_by_first = held()[work_id]
    await first.aclose()  # the old leader stops: its heartbeats stop, the record stays
    assert held()[work_id] == held_by_first

    second = EnvironmentLoop(objects, NS, NAME, jitter=lambda: 0.0)
    await second.run_pass()
    assert second.holder.holding(work_id)
    await asyncio.sleep(FIRST_HEARTBEAT_S + 3 * LEASE_TTL)  # several TTLs: only the new leader beats
    item = admin.work(env_id, work_id)
    assert item["state"] == "active", item  # never queued again
    assert held()[work_id] != held_by_first  # the chain went on from the old leader's value

    token = decode_work_secret(minted["work_secret"]).sessions_token
    assert await runner_first_heartbeat(server, env_id, work_id, token) == 200
    await eventually(lambda: work_id in second.holder.outcomes)
    assert second.holder.outcomes[work_id] == "taken_over"
    assert work_id not in held()  # a hold that ended for good clears its record
    await second.aclose()


class Recorded(WorkQueue):
    """The real queue, recording each call in order (shared by the instances a test makes)."""

    calls: ClassVar[list[tuple[str, str]]] = []
    rewrite_type: ClassVar[str | None] = None

    async def poll(self, block_ms: int | None = 999) -> dict[str, Any] | None:
        item = await super().poll(block_ms)
        self.calls.append(("poll", "" if item is None else item["id"]))
        if item is not None and self.rewrite_type is not None:
            item["data"]["type"] = self.rewrite_type
        return item

    async def ack(self, work_id: str) -> dict[str, Any]:
        self.calls.append(("ack", work_id))
        return await super().ack(work_id)

    async def stop(self, work_id: str, *, force: bool = True) -> None:
        self.calls.append(("stop", work_id))
        await super().stop(work_id, force=force)

    async def session(self, session_id: str, sessions_token: str | None) -> dict[str, Any]:
        self.calls.append(("session", "token" if sessions_token else "environment key"))
        return await super().session(session_id, sessions_token)


async def test_an_item_it_will_not_run_is_acknowledged_first_then_force_stopped(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    Recorded.calls, Recorded.rewrite_type = [], "healthcheck"
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=Recorded)
    minted = admin.mint(env_id, "Health")
    await loop.run_pass()
    assert Recorded.calls == [
        ("poll", minted["work_id"]),
        ("ack", minted["work_id"]),
        ("stop", minted["work_id"]),
    ]
    item = admin.work(env_id, minted["work_id"])
    assert (item["state"], item["acknowledged_at"] is not None) == ("stopped", True)
    assert objects.smems == {}
    # an item without a secret: acknowledged before the session is read with the environment key
    Recorded.calls, Recorded.rewrite_type = [], None
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=type("NoSecret", (Recorded, NoSecretQueue), {}))
    bare = admin.mint(env_id, "Bare")
    await loop.run_pass()
    assert [c[0] for c in Recorded.calls] == ["poll", "ack", "session", "stop"]
    assert admin.work(env_id, bare["work_id"])["state"] == "stopped"
    await loop.aclose()


async def test_retention_zero_stops_the_item_before_the_session_memory_goes(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url, finishedRetentionSeconds=0), {"env-key": {"key": key}})
    Recorded.calls, Recorded.rewrite_type = [], None
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=Recorded)
    minted = admin.mint(env_id, "Gone At Once")
    await loop.run_pass()
    name = d.object_name(minted["session"]["id"])
    objects.finish(name, "Failed", datetime.now(UTC))  # its Pod never ran: nobody stopped the item
    Recorded.calls = []
    await loop.run_pass()
    assert Recorded.calls[0] == ("stop", minted["work_id"])
    assert name not in objects.smems
    assert admin.work(env_id, minted["work_id"])["state"] == "stopped"
    await loop.aclose()


async def test_an_archived_environment_ends_polling_with_a_condition_and_an_event(
    server: RunningStoreServer, admin: Admin
) -> None:
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    Recorded.calls, Recorded.rewrite_type = [], None
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=Recorded)
    admin.http.post(f"/v1/environments/{env_id}/archive").raise_for_status()
    assert await loop.run_pass() == 30.0
    status = (objects.env or {})["status"]
    assert (status["phase"], status["conditions"][0]["reason"]) == ("Failed", d.REASON_UNAVAILABLE)
    assert "archived" in status["lastError"]
    assert [(t, r) for t, r, _ in objects.events] == [("Warning", d.REASON_UNAVAILABLE)]
    Recorded.calls = []
    await loop.run_pass()
    assert Recorded.calls == []  # polling ended
    assert objects.env is not None
    objects.env["metadata"]["generation"] = 2  # the spec changed: polling resumes (and is refused again)
    await loop.run_pass()
    assert [c[0] for c in Recorded.calls] == ["poll"] or Recorded.calls == []
    assert len(objects.events) == 2
    await loop.aclose()


class Throttled(WorkQueue):
    async def poll(self, block_ms: int | None = 999) -> dict[str, Any] | None:
        raise QueueError(429, "poll: HTTP 429: slow down", retry_after=7.0)


async def test_retry_after_is_honoured(server: RunningStoreServer, admin: Admin) -> None:
    _, _, objects, _ = setup(server, admin)
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=Throttled, jitter=lambda: 0.0)
    assert [await loop.run_pass() for _ in range(2)] == [7.0, 7.0]  # longer than the backoff's 1 and 2 s
    assert (objects.env or {})["status"]["phase"] == "Degraded"


async def test_credential_custom_headers_are_dropped_and_worker_ids_differ_per_start(
    server: RunningStoreServer, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "ANTHROPIC_CUSTOM_HEADERS", "X-Api-Key: sk-wrong\nAuthorization: Bearer wrong\nX-Extra: 1"
    )
    env_id, _, objects, loop = setup(server, admin)
    minted = admin.mint(env_id, "Headers")
    await loop.run_pass()
    assert d.object_name(minted["session"]["id"]) in objects.smems  # the environment key alone went out
    other = EnvironmentLoop(objects, NS, NAME)
    assert loop.queue is not None
    await other._queue_for(validate_environment_spec((objects.env or {})["spec"]), "k")
    assert other.queue is not None
    assert loop.queue.worker_id != other.queue.worker_id
    assert loop.queue.worker_id.startswith(f"{NS}.{NAME}.")
    await loop.aclose()
    await other.aclose()


class Counting(WorkQueue):
    polls = 0

    async def poll(self, block_ms: int | None = 999) -> dict[str, Any] | None:
        Counting.polls += 1
        return await super().poll(block_ms)


async def test_the_idle_poll_rate_per_environment(server: RunningStoreServer, admin: Admin) -> None:
    """The measured figure in docs/performance.md: an idle AgentEnvironment's polls per minute."""
    env_id, key, _ = admin.environment()
    objects = Objects(environment(env_id, server.url), {"env-key": {"key": key}})
    Counting.polls = 0
    loop = EnvironmentLoop(objects, NS, NAME, queue_factory=Counting)  # real jitter
    stop = asyncio.Event()
    window = 30.0
    task = asyncio.create_task(loop.run(stop))
    await asyncio.sleep(window)
    stop.set()
    await task
    per_minute = Counting.polls * 60 / window
    print(f"idle polls: {Counting.polls} in {window:.0f} s = {per_minute:.1f} per minute")
    assert per_minute <= 30  # the budget: a poll starts at most every 2 s
    assert per_minute >= 12  # and it does poll: at least every 4 s (plus the long poll's own second)
