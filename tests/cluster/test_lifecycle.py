"""Lifecycle scenarios that need the real controllers: garbage collection when a namespace goes, the
operator's own Pod rescheduled by its Deployment mid-session, a sandbox whose PID 1 ignores SIGTERM, and a
sidecar that cannot start."""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import RunningStoreServer
from memsync.controller.sessionmemory.pod import pod_name_for

from .conftest import SYSTEM_NS, Cluster
from .scenario import (
    FINAL,
    agent,
    agent_report,
    assert_store_holds_final_files,
    container,
    container_state,
    make_store,
    pod_status,
    secret_object,
    sid,
    smem,
    start_session,
    steady_session,
    store_files,
    wait_phase,
    wait_store_has,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


async def test_namespace_deleted_collects_everything(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "ns-gone", {})
    pod = await steady_session(
        deployed, tier_store, namespace, "ns-gone", store=store, mount="n", linger=2, memories=3
    )
    deployed.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=240s", timeout=260)
    # The namespace controller deleted the SessionMemory and the Pod; the operator's finalizer held the
    # SessionMemory until the Pod's final flush; nothing is left.
    assert deployed.get_or_none("namespace", namespace) is None
    report = agent_report(deployed, namespace, pod)
    assert report["interrupted"] is True
    await assert_store_holds_final_files(tier_store, store, report, "n")


def operator_pods(cluster: Cluster) -> list[dict[str, object]]:
    items: list[dict[str, object]] = cluster.get(
        "-n", SYSTEM_NS, "pods", "-l", "app.kubernetes.io/name=memsync-operator"
    )["items"]
    return items


async def test_operator_pod_deleted_and_rescheduled(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "resume", {})
    pod = await steady_session(deployed, tier_store, namespace, "resume", store=store, mount="n", duration=40)
    uid = deployed.get("-n", namespace, "pod", pod)["metadata"]["uid"]
    # The replica that acts (it holds the Lease) is deleted: it lets the Lease go as it stops, the standby
    # takes over, and the Deployment starts a replacement.
    holder = str(
        (deployed.get("-n", SYSTEM_NS, "lease", "memsync-operator").get("spec") or {})["holderIdentity"]
    )
    [old] = [p for p in operator_pods(deployed) if holder.startswith(f"{p['metadata']['name']}_")]  # type: ignore[index]
    old_name = old["metadata"]["name"]  # type: ignore[index]
    deployed.kubectl("-n", SYSTEM_NS, "delete", "pod", old_name, "--wait=true", "--timeout=120s", timeout=140)
    deployed.kubectl(
        "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=180s", timeout=200
    )
    names = {p["metadata"]["name"] for p in operator_pods(deployed)}  # type: ignore[index]
    assert old_name not in names and len(names) == 2
    new_holder = deployed.get("-n", SYSTEM_NS, "lease", "memsync-operator")["spec"]["holderIdentity"]
    assert new_holder != holder and not new_holder.startswith(f"{old_name}_")
    status = wait_phase(deployed, namespace, "resume", FINAL)
    assert status["phase"] == "Succeeded", status
    # The new leader resumed the session: the same sandbox Pod, never a second one.
    pods = deployed.get("-n", namespace, "pods")["items"]
    assert [p["metadata"]["uid"] for p in pods] == [uid]
    await assert_store_holds_final_files(tier_store, store, agent_report(deployed, namespace, pod), "n")


async def test_sandbox_that_ignores_sigterm(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """A sandbox that ignores SIGTERM (``trap '' TERM``, which any process can; a PID 1 with no handler at all
    is a kind scenario, the process kubelet has no PID namespace): the kubelet kills it at the deadline, and
    the sidecar still gets its SIGTERM afterwards and flushes what the sandbox wrote."""
    store = await make_store(tier_store, "stubborn", {})
    script = "trap '' TERM; echo one > /mnt/memory/n/one.md; while true; do sleep 0.2; done"
    await start_session(
        deployed,
        tier_store,
        namespace,
        "stubborn",
        stores=[(store, "n", "read_write")],
        sandbox={"image": "memsync:kind", "command": ["sh", "-c", script]},
        final_flush=5,
    )
    wait_phase(deployed, namespace, "stubborn", ("Running",))
    # "Running" is the container's start, not the script's: a SIGTERM before the shell ran its `trap` ends
    # it at once (seen once in five runs). one.md is written after the trap, and synced: the trap is set.
    await wait_store_has(tier_store, store, 1)
    pod = pod_name_for("stubborn")
    grace = deployed.get("-n", namespace, "pod", pod)["spec"]["terminationGracePeriodSeconds"]
    started = time.monotonic()
    deployed.kubectl(
        "-n", namespace, "delete", "smem", "stubborn", "--wait=true", "--timeout=240s", timeout=260
    )
    took = time.monotonic() - started
    assert took >= grace, f"the sandbox ignored SIGTERM, yet the Pod was gone after {took:.1f} s < {grace} s"
    assert set(await store_files(tier_store, store)) == {"/one.md"}
    log = deployed.pod_logs(namespace, pod, "memsync-sync")
    assert "flush" in log.lower(), log[-3000:]


async def test_sidecar_that_cannot_start_keeps_the_agent_from_running(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """The work-item Secret disappears while ``memsync-mount`` runs: the sidecar cannot be created
    (CreateContainerConfigError), so the agent must never start."""
    store = await make_store(tier_store, "nosync", {})
    session = sid()
    secret = await tier_store.mint_secret([(store, "read_write")], session_id=session)
    deployed.apply(secret_object(namespace, "work", secret))
    assert tier_store.process is not None
    os.kill(tier_store.process.pid, signal.SIGSTOP)  # hold the mount while the Secret goes
    try:
        deployed.apply(
            smem(
                namespace,
                "nosync",
                session=session,
                base_url=tier_store.url,
                stores=[(store, "n", "read_write")],
                sandbox=agent("--duration", "5"),
            )
        )
    except BaseException:
        os.kill(tier_store.process.pid, signal.SIGCONT)
        raise
    pod = pod_name_for("nosync")
    try:
        deployed.wait(
            "memsync-mount running",
            lambda: "running" in container_state(deployed, namespace, pod, "memsync-mount"),
            120,
        )
        deployed.kubectl("-n", namespace, "delete", "secret", "work")
    finally:
        os.kill(tier_store.process.pid, signal.SIGCONT)
    deployed.wait(
        "the sidecar waiting with CreateContainerConfigError",
        lambda: (
            container_state(deployed, namespace, pod, "memsync-sync").get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        ),
        120,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        sandbox = container(pod_status(deployed, namespace, pod), "sandbox")
        assert "running" not in sandbox["state"] and "terminated" not in sandbox["state"], sandbox
        time.sleep(1)
    assert pod_status(deployed, namespace, pod)["phase"] == "Pending"
