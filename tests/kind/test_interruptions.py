"""Interruptions on a real kubelet, with a second node: a drain of the worker that runs a session with
``onInterruption: Restart`` (the session continues in a new Pod on the other node, after the evicted Pod's
final flush), and the worker lost (its node container paused: the kubelet stops answering), where the session
restarts once the lost Pod is force-deleted (the kind overlay runs the operator with
``--force-delete-lost-pods`` and a 10 s ``--node-lost-grace``). Each asserts the SessionMemory's end, the
Pods' nodes, and the store: nothing written before the interruption is lost (for the lost node: nothing the
periodic sync had sent).

The sessions tolerate the worker's taint and prefer it (``nodes.WORKER_TAINT``); a restarted one lands on
the control-plane node once the worker is cordoned or unreachable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memsync.controller.sessionmemory.pod import pod_name_for
from support.k8s_scenarios import FINAL, as_store_paths, make_store, store_files, wait_store_has

from .conftest import REQUIRED, KindEnv, kubectl, run
from .nodes import WORKER_TAINT, worker_name
from .scenario import (
    LogFollower,
    agent,
    pod,
    ready_reason,
    smem_status,
    start_session,
    wait_phase,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(600)]

#: How long each Pod's scripted agent writes: the first is interrupted well before, the restart's ends.
AGENT_SECONDS = 40


@pytest.fixture
def worker(kind_env: KindEnv) -> Iterator[str]:
    name = worker_name()
    if name is None:
        why = "the cluster has no worker node (tests/kind/tier.sh adds one; kind-config.yaml has none)"
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)
    yield name
    kubectl("uncordon", name, check=False)


def on_the_worker(sandbox: dict[str, Any]) -> dict[str, Any]:
    """Pod spec fields that tolerate the worker's taint and prefer it, and name each agent after its Pod
    (a restarted Pod's agent writes files of its own)."""
    sandbox["env"] = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    sandbox["args"] = [*sandbox["args"], "--name", "$(POD_NAME)"]
    return {
        "tolerations": [{**WORKER_TAINT, "operator": "Equal"}],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [worker_name()]}
                            ]
                        },
                    }
                ]
            }
        },
    }


def node_of(namespace: str, name: str) -> str | None:
    found = pod(namespace, name)
    return (found or {}).get("spec", {}).get("nodeName")


async def wait_for(what: str, probe: Any, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(1)
    raise AssertionError(f"{what}: not reached in {timeout:.0f} s")


async def session_on_the_worker(
    kind_env: KindEnv, namespace: str, name: str, store: str, duration: int
) -> str:
    sandbox = agent(
        "--scenario", "steady", "--duration", str(duration), "--interval", "0.5", image=kind_env.image
    )
    first = await start_session(
        kind_env,
        namespace,
        name,
        store,
        slug="w",
        sandbox=sandbox,
        interval=5,
        final_flush=5,
        pod_spec=on_the_worker(sandbox),
        spec={"onInterruption": "Restart"},
    )
    await wait_phase(namespace, name, ("Running",))
    return first


async def test_a_drained_worker_restarts_the_session_on_another_node(
    kind_env: KindEnv, namespace: str, worker: str
) -> None:
    store = await make_store(kind_env, "drained", {})
    first = await session_on_the_worker(kind_env, namespace, "drained", store, duration=AGENT_SECONDS)
    assert node_of(namespace, first) == worker
    await wait_store_has(kind_env, store, 3, timeout=180)
    logs = LogFollower(namespace, first)
    started = time.monotonic()
    kubectl(
        "drain", worker, "--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector",
        "app.kubernetes.io/managed-by=memsync", "--timeout=180s", timeout=240,
    )  # fmt: skip
    second = pod_name_for("drained", 1)
    status = await wait_for(
        "the restart", lambda: (s := smem_status(namespace, "drained")).get("podName") == second and s
    )
    assert status["restarts"] == 1 and status["lastRestartTime"], status
    await wait_phase(namespace, "drained", ("Running",))
    restarted_in = time.monotonic() - started
    assert node_of(namespace, second) not in (None, worker)
    before = logs.report()  # the evicted agent's final report: every file it wrote before its SIGTERM
    assert before["interrupted"] is True, "the first agent ended before the drain: nothing was interrupted"
    after_logs = LogFollower(namespace, second)
    final = await wait_phase(namespace, "drained", FINAL, timeout=AGENT_SECONDS + 120)
    assert final["phase"] == "Succeeded" and final["restarts"] == 1 and final["podName"] == second, final
    after = after_logs.report()
    assert after["interrupted"] is False
    wanted = as_store_paths(before["stores"]["/mnt/memory/w"]["files"]) | as_store_paths(
        after["stores"]["/mnt/memory/w"]["files"]
    )
    assert await store_files(kind_env, store) == wanted
    print(f"drain to a running restart: {restarted_in:.1f} s")


async def test_a_lost_worker_restarts_the_session_once_its_pod_is_force_deleted(
    kind_env: KindEnv, namespace: str, worker: str
) -> None:
    store = await make_store(kind_env, "lost", {})
    first = await session_on_the_worker(kind_env, namespace, "lost", store, duration=AGENT_SECONDS)
    assert node_of(namespace, first) == worker
    await wait_store_has(kind_env, store, 3, timeout=180)
    status = await wait_for("a sync", lambda: (s := smem_status(namespace, "lost")).get("lastSyncTime") and s)
    synced = await store_files(kind_env, store)  # what the periodic sync had sent
    run("docker", "pause", worker)
    started = time.monotonic()
    try:
        status = await wait_for(
            "NodeLost, restarting",
            lambda: ready_reason(s := smem_status(namespace, "lost")) == "Restarting" and s,
            300,
        )
        judged_in = time.monotonic() - started
        assert worker in status["message"] and "last complete sync on record" in status["message"], status
        assert status["restarts"] == 1
        flushed = next(c for c in status["conditions"] if c["type"] == "Flushed")
        assert flushed["status"] == "False" and "could not run on lost node" in flushed["message"], flushed
        second = pod_name_for("lost", 1)
        await wait_for("the lost Pod force-deleted", lambda: pod(namespace, first) is None, 180)
        events = kubectl("-n", namespace, "get", "events", "--field-selector", "reason=LostPodForceDeleted")
        assert first in events, events
        await wait_for("the restart's Pod", lambda: node_of(namespace, second), 120)
        assert node_of(namespace, second) != worker
        await wait_phase(namespace, "lost", ("Running",))
        restarted_in = time.monotonic() - started
        after_logs = LogFollower(namespace, second)
        final = await wait_phase(namespace, "lost", FINAL, timeout=AGENT_SECONDS + 120)
        assert final["phase"] == "Succeeded" and final["restarts"] == 1 and final["podName"] == second, final
        after = as_store_paths(after_logs.report()["stores"]["/mnt/memory/w"]["files"])
        # everything the periodic sync had sent before the node was lost is there, with the new Pod's
        # files; anything else is the lost Pod's, sent after that look
        remote = await store_files(kind_env, store)
        assert synced.items() <= remote.items() and after.items() <= remote.items()
        extra = remote.keys() - synced.keys() - after.keys()
        assert all(path.lstrip("/").startswith(first) for path in extra), sorted(extra)
        print(f"node paused to NodeLost: {judged_in:.1f} s; to a running restart: {restarted_in:.1f} s")
    finally:
        run("docker", "unpause", worker, check=False)
