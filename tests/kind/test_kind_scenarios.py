"""The issue-5 scenarios on a real kind cluster (``make e2e``): the deployed operator, real Pods with a native
sidecar and preStop hook, the in-cluster store server, and the scripted agent from the memsync image as the
sandbox. Skipped, with the reason, without docker + kind (see ``conftest.py``).

Scenario 6's "something already at the mount path" is local-tier only: in a real Pod the ``memory`` emptyDir
is always empty when ``memsync-mount`` runs, so nothing can be planted there; the store that does not exist
covers the mount failure here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

from memsync.agent import messages
from memsync.api.hashing import content_sha256
from memsync.controller.sessionmemory.pod import pod_name_for
from support.k8s_scenarios import (
    FINAL,
    as_store_paths,
    assert_final_store,
    container,
    make_store,
    store_files,
    versions,
    wait_store_has,
)

from .conftest import IN_CLUSTER_STORE_URL, KindEnv, kubectl, kubectl_json, run
from .scenario import (
    LogFollower,
    agent,
    agent_report,
    create_secret,
    create_smem,
    mint,
    pod_status,
    sid,
    wait_phase,
)

# The timeout covers each test's own body only: the cluster (created, image built and loaded, operator
# deployed) is set up once by the session fixture, bounded by its own subprocess timeouts.
pytestmark = [pytest.mark.kind, pytest.mark.timeout(600, func_only=True)]


# --------------------------------------------------------------------------------------------------------
# 1. happy path
# --------------------------------------------------------------------------------------------------------


async def test_happy_path(kind_env: KindEnv, namespace: str) -> None:
    notes = await make_store(kind_env, "notes", {"/existing.md": "from the store\n"})
    handbook_content = {"/rules.md": "be kind\n"}
    handbook = await make_store(kind_env, "handbook", handbook_content)
    before = await versions(kind_env, handbook)
    session = sid()
    create_secret(
        namespace, "work", mint(kind_env, [(notes, "read_write"), (handbook, "read_only")], session)
    )
    create_smem(
        namespace,
        "happy",
        session,
        [(notes, "notes", "read_write"), (handbook, "handbook", "read_only")],
        agent(
            "--read-only",
            "handbook",
            "--duration",
            "20",
            "--interval",
            "0.3",
            "--seed",
            "1",
            image=kind_env.image,
        ),
    )
    status = await wait_phase(namespace, "happy", FINAL)
    assert status["phase"] == "Succeeded", status
    report = agent_report(namespace, pod_name_for("happy"))
    assert_final_store(await store_files(kind_env, notes), report, "notes", status)
    assert await store_files(kind_env, handbook) == {
        p: content_sha256(c) for p, c in handbook_content.items()
    }
    assert await versions(kind_env, handbook) == before
    per_store = {s["memoryStoreId"]: s for s in status["stores"]}
    assert per_store[notes]["memoriesMounted"] == 1 and per_store[notes]["unsent"] == 0
    assert per_store[handbook]["uploaded"] == 0


# --------------------------------------------------------------------------------------------------------
# 2. two sessions, one store
# --------------------------------------------------------------------------------------------------------


async def test_two_sessions_one_store(kind_env: KindEnv, namespace: str) -> None:
    store = await make_store(kind_env, "team", {"/shared.md": "original\n"})
    names = ("alice", "bob")
    for i, who in enumerate(names):
        session = sid()
        create_secret(namespace, f"work-{who}", mint(kind_env, [(store, "read_write")], session))
        create_smem(
            namespace,
            who,
            session,
            [(store, "team", "read_write")],
            agent(
                "--prefix",
                who,
                "--name",
                who,
                "--first-edit",
                "shared.md",
                "--duration",
                "15",
                "--interval",
                "0.3",
                "--seed",
                str(i),
                image=kind_env.image,
            ),
            secret_name=f"work-{who}",
            interval=10,
        )
    statuses = [await wait_phase(namespace, who, FINAL) for who in names]
    assert [s["phase"] for s in statuses] == ["Succeeded", "Succeeded"], statuses
    remote = await store_files(kind_env, store)
    for who, status in zip(names, statuses, strict=True):
        report = agent_report(namespace, pod_name_for(who))
        assert_final_store(remote, report, "team", status, prefix=f"{who}/")
    edits = {who: content_sha256(f"{who} rewrote this first\n") for who in names}
    winner = next(who for who, sha in edits.items() if remote["/shared.md"] == sha)
    loser = "bob" if winner == "alice" else "alice"
    logs = kubectl("-n", namespace, "logs", pod_name_for(loser), "-c", "memsync-sync")
    assert messages.BOTH_CHANGED in logs or messages.UPLOAD_LOST in logs, logs[-3000:]


# --------------------------------------------------------------------------------------------------------
# 3. deleted while the agent writes
# --------------------------------------------------------------------------------------------------------


async def test_deleted_while_writing(kind_env: KindEnv, namespace: str) -> None:
    store = await make_store(kind_env, "journal", {})
    session = sid()
    create_secret(namespace, "work", mint(kind_env, [(store, "read_write")], session))
    create_smem(
        namespace,
        "doomed",
        session,
        [(store, "journal", "read_write")],
        agent(
            "--scenario",
            "steady",
            "--duration",
            "600",
            "--interval",
            "0.3",
            "--term-linger",
            "3",
            image=kind_env.image,
        ),
    )
    await wait_phase(namespace, "doomed", ("Running",))
    pod = pod_name_for("doomed")
    follow = LogFollower(namespace, pod)
    try:
        await wait_store_has(kind_env, store, 3, timeout=180)
        kubectl("-n", namespace, "delete", "smem", "doomed", "--wait=true", "--timeout=240s", timeout=260)
    except BaseException:
        follow.stop()
        raise
    report = follow.report(timeout=120)
    assert report["interrupted"] is True and report["ticks"] > report["sigterm_tick"]
    assert await store_files(kind_env, store) == as_store_paths(
        report["stores"]["/mnt/memory/journal"]["files"]
    )


# --------------------------------------------------------------------------------------------------------
# 4. sidecar SIGKILLed and restarted
# --------------------------------------------------------------------------------------------------------


def sigkill_sidecar(namespace: str, pod: str) -> None:
    """SIGKILL the running memsync-sync container through the node's container runtime."""
    node = kubectl_json("-n", namespace, "get", "pod", pod)["spec"]["nodeName"]
    ids = run(
        "docker",
        "exec",
        node,
        "crictl",
        "ps",
        "-q",
        "--name",
        "memsync-sync",
        "--label",
        f"io.kubernetes.pod.namespace={namespace}",
        "--label",
        f"io.kubernetes.pod.name={pod}",
    ).stdout.split()
    assert len(ids) == 1, ids
    run("docker", "exec", node, "crictl", "stop", "--timeout", "0", ids[0])  # timeout 0: SIGKILL at once


async def test_sidecar_killed_and_restarted(kind_env: KindEnv, namespace: str) -> None:
    store = await make_store(kind_env, "scratch", {})
    session = sid()
    create_secret(namespace, "work", mint(kind_env, [(store, "read_write")], session))
    create_smem(
        namespace,
        "killed",
        session,
        [(store, "scratch", "read_write")],
        agent("--scenario", "steady", "--duration", "40", "--interval", "0.3", image=kind_env.image),
    )
    await wait_phase(namespace, "killed", ("Running",))
    pod = pod_name_for("killed")
    await wait_store_has(kind_env, store, 3, timeout=180)
    sigkill_sidecar(namespace, pod)
    deadline = time.monotonic() + 120
    while container(pod_status(namespace, pod), "memsync-sync").get("restartCount", 0) < 1:
        assert time.monotonic() < deadline, "the sidecar was not restarted"
        await asyncio.sleep(1)
    status = await wait_phase(namespace, "killed", FINAL)
    assert status["phase"] == "Succeeded", status
    report = agent_report(namespace, pod)
    remote = await store_files(kind_env, store)
    assert remote == as_store_paths(report["stores"]["/mnt/memory/scratch"]["files"])
    history = await versions(kind_env, store)
    assert sorted(op for _, op in history) == ["created"] * len(remote)


# --------------------------------------------------------------------------------------------------------
# 5. no usable work-item secret
# --------------------------------------------------------------------------------------------------------


async def test_missing_secret(kind_env: KindEnv, namespace: str) -> None:
    store = await make_store(kind_env, "nosecret", {})
    create_smem(
        namespace,
        "nosecret",
        sid(),
        [(store, "notes", "read_write")],
        agent("--duration", "5", image=kind_env.image),
        secret_name="absent",
    )
    status = await wait_phase(namespace, "nosecret", ("Failed",), timeout=120)
    assert "Secret absent (spec.workItemSecretRef.name) does not exist" in status["message"]
    pods = kubectl_json("-n", namespace, "get", "pods")["items"]
    assert pods == []  # the agent never starts


async def test_secret_without_sessions_token(kind_env: KindEnv, namespace: str) -> None:
    store = await make_store(kind_env, "tokenless", {"/a.md": "a\n"})
    not_a_token = base64.urlsafe_b64encode(
        json.dumps({"api_base_url": IN_CLUSTER_STORE_URL}).encode()
    ).decode()
    create_secret(namespace, "work", not_a_token)
    create_smem(
        namespace,
        "tokenless",
        sid(),
        [(store, "notes", "read_write")],
        agent("--duration", "5", image=kind_env.image),
    )
    status = await wait_phase(namespace, "tokenless", ("Failed",))
    assert messages.NO_SESSIONS_TOKEN in status["message"], status
    sandbox = container(pod_status(namespace, pod_name_for("tokenless")), "sandbox")
    assert "running" not in sandbox["state"] and "terminated" not in sandbox["state"]  # never started


# --------------------------------------------------------------------------------------------------------
# 6. a store that cannot be mounted
# --------------------------------------------------------------------------------------------------------


async def test_store_that_does_not_exist(kind_env: KindEnv, namespace: str) -> None:
    store = await make_store(kind_env, "gone", {"/a.md": "a\n"})
    session = sid()
    create_secret(namespace, "work", mint(kind_env, [(store, "read_write")], session))
    async with kind_env.admin_client() as admin:
        await admin.delete_store(store)
    create_smem(
        namespace,
        "gone",
        session,
        [(store, "gone", "read_write")],
        agent("--duration", "5", image=kind_env.image),
    )
    status = await wait_phase(namespace, "gone", ("Failed",))
    assert f"{messages.DOWNLOAD_FAILED}{store}" in status["message"], status
    sandbox = container(pod_status(namespace, pod_name_for("gone")), "sandbox")
    assert "running" not in sandbox["state"] and "terminated" not in sandbox["state"]
