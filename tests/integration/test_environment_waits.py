"""The AgentEnvironment poll loop and sessions that do not start (against the real store server's work queue):
no item is claimed into a full quota, an item is never heartbeated past its start deadline and is then
force-stopped, and a re-delivered item does not wait on a session whose node was lost."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from test_environment_loop import NAME, NS, Admin, admin, environment, eventually, server  # noqa: F401

from conftest import RunningStoreServer
from memsync.controller.environment import decisions as d
from memsync.controller.environment.holder import EXPIRED
from memsync.controller.environment.loop import AT_CAPACITY_WAIT_S, EnvironmentLoop
from memsync.crd.models import ANNOTATION_PREFIX
from support.environment_objects import Objects

DEADLINE_S = 1.5


def waiting_for_quota(objects: Objects, name: str) -> None:
    """The SessionMemory controller's part: the Pod was refused by a quota (Pending, QuotaExceeded)."""
    objects.smems[name]["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "QuotaExceeded",
                "message": "exceeded quota: compute",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }


def failed(objects: Objects, name: str, reason: str) -> None:
    objects.smems[name]["status"] = {
        "phase": "Failed",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": reason,
                "message": reason,
                "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ],
    }


def setup(store: RunningStoreServer, client: Admin, **spec: Any) -> tuple[str, Objects, EnvironmentLoop]:
    env_id, key, _ = client.environment()
    objects = Objects(environment(env_id, store.url, **spec), {"env-key": {"key": key}})
    loop = EnvironmentLoop(objects, NS, NAME, jitter=lambda: 0.0, start_deadline=DEADLINE_S)
    return env_id, objects, loop


async def test_no_item_is_claimed_into_a_full_quota(server: RunningStoreServer, admin: Admin) -> None:  # noqa: F811
    env_id, objects, loop = setup(server, admin, maxConcurrentSessions=10)
    first = admin.mint(env_id, "Quota One")
    await loop.run_pass()
    name = d.object_name(first["session"]["id"])
    waiting_for_quota(objects, name)
    second = admin.mint(env_id, "Quota Two")
    assert await loop.run_pass() == AT_CAPACITY_WAIT_S  # far below maxConcurrentSessions, yet no poll
    assert admin.work(env_id, second["work_id"])["state"] == "queued"
    assert len(objects.smems) == 1
    assert admin.work(env_id, first["work_id"])["state"] in ("starting", "active")  # still held
    objects.smems[name]["status"] = {"phase": "Running"}  # the quota freed up: its Pod runs
    await loop.run_pass()
    assert d.object_name(second["session"]["id"]) in objects.smems
    await loop.aclose()


async def test_an_item_is_not_heartbeated_past_its_start_deadline_and_is_force_stopped(
    server: RunningStoreServer,  # noqa: F811
    admin: Admin,  # noqa: F811
) -> None:
    env_id, objects, loop = setup(server, admin)
    minted = admin.mint(env_id, "Too Slow")
    work_id = minted["work_id"]
    await loop.run_pass()
    await eventually(lambda: admin.work(env_id, work_id)["state"] == "active")  # the holder's first beat
    await eventually(lambda: loop.holder.outcomes.get(work_id) == EXPIRED, timeout=DEADLINE_S + 5)
    # nobody heartbeats it any more: its lease (2 s here) lapses and the server queues it again
    await eventually(lambda: admin.work(env_id, work_id)["state"] == "queued", timeout=10)
    # the SessionMemory controller fails the session (StartTimeout): the item is force-stopped, as the SDK's
    # worker stops an item it cannot run
    failed(objects, d.object_name(minted["session"]["id"]), "StartTimeout")
    await loop.run_pass()
    assert admin.work(env_id, work_id)["state"] == "stopped"
    await loop.aclose()


async def test_an_item_held_without_a_session_memory_is_failed_at_its_deadline(
    server: RunningStoreServer,  # noqa: F811
    admin: Admin,  # noqa: F811
) -> None:
    """A held item waiting for an earlier SessionMemory of its session that never finishes: at the start
    deadline it is released the way the SDK's worker releases an item it cannot run (force-stopped)."""
    env_id, objects, loop = setup(server, admin)
    minted = admin.mint(env_id, "Blocked")
    session_id, work_id = minted["session"]["id"], minted["work_id"]
    name = d.object_name(session_id)
    objects.smems[name] = {
        "apiVersion": "agents.memsync.dev/v1alpha2",
        "kind": "SessionMemory",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {f"{ANNOTATION_PREFIX}/agentenvironment": NAME},
            "annotations": {f"{ANNOTATION_PREFIX}/work-id": "work_earlier"},
        },
        "spec": {"sessionId": session_id},
        "status": {"phase": "Running"},
    }
    await loop.run_pass()
    assert set(loop.claims.pending) == {work_id}
    await asyncio.sleep(DEADLINE_S + 1)
    await loop.run_pass()
    assert loop.claims.pending == {}
    assert admin.work(env_id, work_id)["state"] == "stopped"
    assert loop.tally.get("itemsFailed") == 1
    await loop.aclose()
