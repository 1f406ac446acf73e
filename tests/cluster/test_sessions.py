"""The session scenarios of the local and kind tiers on the real control plane: the operator deployed from
``manifests/overlays/kind`` runs in its own Pod with its ServiceAccount token, creates each sandbox Pod
through the API server, and the process kubelet runs it (native sidecar, preStop hook, probes, the Pod's
own network and mount namespaces)."""

from __future__ import annotations

import base64
import json

import pytest

from conftest import RunningStoreServer
from memsync.agent import messages
from memsync.api.hashing import content_sha256
from memsync.controller.sessionmemory.pod import pod_name_for

from .conftest import Cluster
from .scenario import (
    FINAL,
    agent,
    agent_report,
    as_store_paths,
    assert_final_store,
    assert_store_holds_final_files,
    condition,
    container,
    kill_container,
    make_store,
    pod_status,
    secret_object,
    sid,
    smem,
    start_session,
    steady_session,
    store_files,
    versions,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


async def test_happy_path(deployed: Cluster, tier_store: RunningStoreServer, namespace: str) -> None:
    notes = await make_store(tier_store, "notes", {"/existing.md": "from the store\n"})
    handbook_content = {"/rules.md": "be kind\n"}
    handbook = await make_store(tier_store, "handbook", handbook_content)
    before = await versions(tier_store, handbook)
    await start_session(
        deployed,
        tier_store,
        namespace,
        "happy",
        stores=[(notes, "notes", "read_write"), (handbook, "handbook", "read_only")],
        sandbox=agent("--read-only", "handbook", "--duration", "10", "--interval", "0.3", "--seed", "1"),
    )
    status = wait_phase(deployed, namespace, "happy", FINAL)
    assert status["phase"] == "Succeeded", status
    assert condition(status, "Flushed")["status"] == "True", status
    pod = pod_name_for("happy")
    report = agent_report(deployed, namespace, pod)
    assert_final_store(await store_files(tier_store, notes), report, "notes", status)
    assert await store_files(tier_store, handbook) == {
        p: content_sha256(c) for p, c in handbook_content.items()
    }
    assert await versions(tier_store, handbook) == before
    per_store = {s["memoryStoreId"]: s for s in status["stores"]}
    assert per_store[notes]["memoriesMounted"] == 1 and per_store[notes]["unsent"] == 0
    assert per_store[handbook]["uploaded"] == 0
    # The Pod really ran on the process kubelet: its own IP, the sidecar started before the agent.
    pod_obj = pod_status(deployed, namespace, pod)
    assert pod_obj["phase"] == "Succeeded" and pod_obj["podIP"].startswith("10.213.")
    sync = container(pod_obj, "memsync-sync")["state"]["terminated"]
    sandbox = container(pod_obj, "sandbox")["state"]["terminated"]
    assert sync["startedAt"] <= sandbox["startedAt"] and sandbox["exitCode"] == 0


async def test_two_sessions_share_a_store(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "team", {"/shared.md": "original\n"})
    names = ("alice", "bob")
    for i, who in enumerate(names):
        await start_session(
            deployed,
            tier_store,
            namespace,
            who,
            stores=[(store, "team", "read_write")],
            sandbox=agent(
                "--prefix",
                who,
                "--name",
                who,
                "--first-edit",
                "shared.md",
                "--duration",
                "12",
                "--interval",
                "0.3",
                "--seed",
                str(i),
            ),
            interval=8,
        )
    statuses = [wait_phase(deployed, namespace, who, FINAL) for who in names]
    assert [s["phase"] for s in statuses] == ["Succeeded", "Succeeded"], statuses
    remote = await store_files(tier_store, store)
    ips = set()
    for who, status in zip(names, statuses, strict=True):
        pod = pod_name_for(who)
        ips.add(pod_status(deployed, namespace, pod)["podIP"])
        report = agent_report(deployed, namespace, pod)
        assert_final_store(remote, report, "team", status, prefix=f"{who}/")
        # Each Pod had its own /mnt/memory: the other agent's files arrived only through the store.
    assert len(ips) == 2  # two network namespaces, both sidecars on port 9477
    edits = {who: content_sha256(f"{who} rewrote this first\n") for who in names}
    winner = next(who for who, sha in edits.items() if remote["/shared.md"] == sha)
    loser = "bob" if winner == "alice" else "alice"
    logs = deployed.pod_logs(namespace, pod_name_for(loser), "memsync-sync")
    assert messages.BOTH_CHANGED in logs or messages.UPLOAD_LOST in logs, logs[-3000:]


async def test_deleted_mid_session_flushes(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "journal", {})
    pod = await steady_session(
        deployed, tier_store, namespace, "doomed", store=store, mount="journal", linger=3, memories=3
    )
    deployed.kubectl(
        "-n", namespace, "delete", "smem", "doomed", "--wait=true", "--timeout=240s", timeout=260
    )
    # The finalizer held the SessionMemory until the Pod was gone: the Pod went through the full
    # graceful deletion, and the final delete of the process kubelet removed it.
    assert deployed.get_or_none("-n", namespace, "pod", pod) is None
    report = agent_report(deployed, namespace, pod)
    assert report["interrupted"] is True and report["ticks"] > report["sigterm_tick"]
    await assert_store_holds_final_files(tier_store, store, report, "journal")
    sync_log = deployed.pod_logs(namespace, pod, "memsync-sync")
    assert "flush" in sync_log.lower(), sync_log[-3000:]


async def test_sidecar_killed_and_restarted(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "scratch", {})
    pod = await steady_session(
        deployed, tier_store, namespace, "killed", store=store, mount="scratch", duration=30, memories=3
    )
    kill_container(deployed, namespace, pod, "memsync-sync")
    deployed.wait(
        "the sidecar restarted",
        lambda: container(pod_status(deployed, namespace, pod), "memsync-sync").get("restartCount", 0) >= 1,
        60,
    )
    status = wait_phase(deployed, namespace, "killed", FINAL)
    assert status["phase"] == "Succeeded", status
    report = agent_report(deployed, namespace, pod)
    remote = await store_files(tier_store, store)
    assert remote == as_store_paths(report["stores"]["/mnt/memory/scratch"]["files"])
    history = await versions(tier_store, store)
    assert sorted(op for _, op in history) == ["created"] * len(remote)


async def test_missing_secret(deployed: Cluster, tier_store: RunningStoreServer, namespace: str) -> None:
    store = await make_store(tier_store, "nosecret", {})
    deployed.apply(
        smem(
            namespace,
            "nosecret",
            session=sid(),
            base_url=tier_store.url,
            stores=[(store, "notes", "read_write")],
            sandbox=agent("--duration", "5"),
            secret_name="absent",
        )
    )
    status = wait_phase(deployed, namespace, "nosecret", ("Failed",), timeout=120)
    assert "Secret absent (spec.workItemSecretRef.name) does not exist" in status["message"]
    assert deployed.get("-n", namespace, "pods")["items"] == []  # the agent never starts


async def test_secret_without_sessions_token(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "tokenless", {"/a.md": "a\n"})
    not_a_token = base64.urlsafe_b64encode(json.dumps({"api_base_url": tier_store.url}).encode()).decode()
    deployed.apply(secret_object(namespace, "work", not_a_token))
    deployed.apply(
        smem(
            namespace,
            "tokenless",
            session=sid(),
            base_url=tier_store.url,
            stores=[(store, "notes", "read_write")],
            sandbox=agent("--duration", "5"),
        )
    )
    status = wait_phase(deployed, namespace, "tokenless", ("Failed",))
    assert messages.NO_SESSIONS_TOKEN in status["message"], status
    sandbox = container(pod_status(deployed, namespace, pod_name_for("tokenless")), "sandbox")
    assert "running" not in sandbox["state"] and "terminated" not in sandbox["state"]  # never started


async def test_store_that_does_not_exist(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "gone", {"/a.md": "a\n"})
    session = sid()
    secret = await tier_store.mint_secret([(store, "read_write")], session_id=session)
    deployed.apply(secret_object(namespace, "work", secret))
    async with tier_store.admin_client() as admin:
        await admin.delete_store(store)
    deployed.apply(
        smem(
            namespace,
            "gone",
            session=session,
            base_url=tier_store.url,
            stores=[(store, "gone", "read_write")],
            sandbox=agent("--duration", "5"),
        )
    )
    status = wait_phase(deployed, namespace, "gone", ("Failed",))
    assert f"{messages.DOWNLOAD_FAILED}{store}" in status["message"], status
    sandbox = container(pod_status(deployed, namespace, pod_name_for("gone")), "sandbox")
    assert "running" not in sandbox["state"] and "terminated" not in sandbox["state"]
