"""Interruptions and a session's end (kopf against the emulated API): a restart after an eviction
(``onInterruption: Restart``) and its bound; a lost node (``NodeLost``, the Pod force-deleted only when
asked, a restart that waits for the Pod to be gone, a node that came back); the finalizer gone at a final
phase; a spec change the running Pod cannot take (``SpecApplied``); a namespace whose grants are gone."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from smem_harness import (
    FAST,
    MOUNTED,
    POD_RES,
    RUNNING_POD,
    Cluster,
    eventually,
    fast_settings,
    flushed,
    pod_status,
    run_operator,
    running,
    smem_body,
    terminated,
)
from test_lifecycle import cond, phase_is, with_secret

from memsync.controller import forbidden, metrics
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.models import FINALIZER, MAX_RESTARTS

LONG_AGO = "2026-01-01T00:00:00Z"


def evicted() -> dict[str, Any]:
    """A Pod ended by the Eviction API (a drain): DisruptionTarget, the sandbox ended, the flush complete."""
    status = pod_status(
        "Failed",
        [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, flushed())],
        [terminated("sandbox", 143)],
    )
    status["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
    ]
    return status


SUCCEEDED_POD = pod_status(
    "Succeeded",
    [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, flushed())],
    [terminated("sandbox", 0)],
)


async def running_session(cluster: Cluster, body: dict[str, Any]) -> str:
    """Create SessionMemory ``s1`` from ``body``, play its Pod running; the Pod's name."""
    pod = pod_name_for("s1")
    await cluster.create_smem(body)
    await eventually(lambda: cluster.pod(pod), what="the Pod")
    await cluster.set_pod_status(pod, RUNNING_POD)
    await eventually(phase_is(cluster, "s1", "Running"), what="Running")
    return pod


def finalizers(cluster: Cluster, name: str) -> list[str]:
    return list(((cluster.smem(name) or {}).get("metadata") or {}).get("finalizers") or [])


async def test_an_evicted_session_restarts_in_a_new_pod(cluster: Cluster) -> None:
    await with_secret(cluster)
    first, second = pod_name_for("s1"), pod_name_for("s1", 1)
    async with run_operator(cluster):
        await running_session(cluster, smem_body("s1", onInterruption="Restart"))
        await cluster.set_pod_status(first, evicted())
        new = await eventually(lambda: cluster.pod(second), what="the restart's Pod")
        assert new["metadata"]["labels"]["agents.memsync.dev/attempt"] == "1"
        status = await eventually(
            lambda: cluster.smem_status("s1").get("podName") == second and cluster.smem_status("s1")
        )
        assert status["restarts"] == 1 and status["lastRestartTime"]
        assert status["phase"] == "Pending"
        await eventually(lambda: "Restarting" in cluster.event_reasons("s1"), what="a Restarting event")
        restarting = next(e for e in cluster.events("s1") if e["reason"] == "Restarting")
        assert "EvictionByEvictionAPI" in restarting["message"] and "restart 1 of" in restarting["message"]
        # the old Pod's late events change nothing
        await cluster.remove_pod(first)
        await cluster.set_pod_status(second, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"), what="Running again")
        await cluster.set_pod_status(second, SUCCEEDED_POD)
        status = await eventually(phase_is(cluster, "s1", "Succeeded"), what="Succeeded")
    assert status["restarts"] == 1 and status["podName"] == second
    assert cond(status, "Flushed")["reason"] == "FlushComplete"
    assert cluster.pod_ever_created(first) == 1 and cluster.pod_ever_created(second) == 1


async def test_restarts_are_bounded(cluster: Cluster) -> None:
    await with_secret(cluster)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1", onInterruption="Restart"))
        for attempt in range(MAX_RESTARTS + 1):
            pod = pod_name_for("s1", attempt)
            await eventually(lambda pod=pod: cluster.pod(pod), what=f"Pod {pod}")  # type: ignore[misc]
            await cluster.set_pod_status(pod, RUNNING_POD)
            await cluster.set_pod_status(pod, evicted())
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
    assert status["restarts"] == MAX_RESTARTS
    assert cond(status, "Ready")["reason"] == "Interrupted"
    assert cluster.pod(pod_name_for("s1", MAX_RESTARTS + 1)) is None


async def test_without_restart_an_eviction_ends_the_session(cluster: Cluster) -> None:
    await with_secret(cluster)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod_name_for("s1")))
        await cluster.set_pod_status(pod_name_for("s1"), evicted())
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
    assert cond(status, "Ready")["reason"] == "Interrupted" and "restarts" not in status
    assert cluster.pod(pod_name_for("s1", 1)) is None


@pytest.mark.parametrize("force", [True, False], ids=["force-delete", "left-terminating"])
async def test_a_lost_node_ends_the_session_with_what_the_sync_had_sent(
    cluster: Cluster, force: bool
) -> None:
    await with_secret(cluster)
    pod = pod_name_for("s1")
    config = dataclasses.replace(FAST, node_lost_grace=0.0, force_delete_lost_pods=force)
    async with run_operator(cluster, config):
        await running_session(cluster, smem_body("s1"))
        await cluster.put_node("node-a", "Unknown", since=LONG_AGO)
        await cluster.bind_pod(pod, "node-a")
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready, flushed_cond = cond(status, "Ready"), cond(status, "Flushed")
        assert ready["reason"] == "NodeLost" and "node node-a has been not answering" in ready["message"]
        assert status["lastSyncTime"] in ready["message"]
        assert (
            flushed_cond["status"] == "False"
            and "could not run on lost node node-a" in flushed_cond["message"]
        )
        await eventually(lambda: "NodeLost" in cluster.event_reasons("s1"), what="a NodeLost event")
        await eventually(lambda: FINALIZER not in finalizers(cluster, "s1"), what="the finalizer removed")
        if force:
            await eventually(lambda: cluster.kmock.force_deleted == [pod], what="the Pod force-deleted")  # type: ignore[attr-defined]
            await eventually(lambda: "LostPodForceDeleted" in cluster.event_reasons("s1"))
            await cluster.remove_pod(pod)  # the API server removes a force-deleted Pod at once
        else:
            await _sleep(2.0)  # several re-checks (every 0.5 s here)
            assert cluster.pod(pod) is not None and cluster.kmock.force_deleted == []  # type: ignore[attr-defined]
    final = cluster.smem_status("s1")
    assert cond(final, "Ready")["reason"] == "NodeLost"  # the Pod's disappearance does not replace it


async def test_a_node_that_comes_back_with_the_final_flush_replaces_the_verdict(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod = pod_name_for("s1")
    async with run_operator(cluster, dataclasses.replace(FAST, node_lost_grace=0.0)):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod))
        await cluster.set_pod_status(pod, RUNNING_POD)
        await cluster.put_node("node-a", "Unknown", since=LONG_AGO)
        await cluster.bind_pod(pod, "node-a")
        await eventually(lambda: cond_reason(cluster) == "NodeLost", what="NodeLost")
        await cluster.set_pod_status(pod, SUCCEEDED_POD)
        status = await eventually(phase_is(cluster, "s1", "Succeeded"), what="the real end")
    assert cond(status, "Flushed")["reason"] == "FlushComplete"


async def test_a_lost_node_restart_waits_for_the_old_pod_to_be_gone(cluster: Cluster) -> None:
    await with_secret(cluster)
    first, second = pod_name_for("s1"), pod_name_for("s1", 1)
    async with run_operator(cluster, dataclasses.replace(FAST, node_lost_grace=0.0)):
        await cluster.create_smem(smem_body("s1", onInterruption="Restart"))
        await eventually(lambda: cluster.pod(first))
        await cluster.set_pod_status(first, RUNNING_POD)
        await cluster.put_node("node-a", "Unknown", since=LONG_AGO)
        await cluster.bind_pod(first, "node-a")
        status = await eventually(lambda: cond_reason(cluster) == "Restarting" and cluster.smem_status("s1"))
        assert status["phase"] == "Pending" and status["restarts"] == 1
        assert "node-a" in status["message"] and f"once sandbox Pod {first} is gone" in status["message"]
        await _sleep(2.0)  # several re-checks (every 0.5 s here)
        assert cluster.pod(second) is None  # never two Pods of one session while the old one may run
        # the node's deletion (or an out-of-service taint): the Pod garbage collector force-deletes the Pod
        await cluster.force_delete_pod(first)
        await eventually(lambda: cluster.pod(second), what="the restart's Pod")


def cond_reason(cluster: Cluster) -> str | None:
    for entry in cluster.smem_status("s1").get("conditions") or []:
        if entry["type"] == "Ready":
            return str(entry["reason"])
    return None


async def test_the_finalizer_goes_once_the_outcome_is_recorded(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: FINALIZER in finalizers(cluster, "s1"), what="the finalizer")
        await eventually(lambda: cluster.pod(pod))
        await cluster.set_pod_status(pod, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"))
        assert FINALIZER in finalizers(cluster, "s1")
        await cluster.set_pod_status(pod, SUCCEEDED_POD)
        await eventually(phase_is(cluster, "s1", "Succeeded"))
        await eventually(lambda: FINALIZER not in finalizers(cluster, "s1"), what="the finalizer removed")
        await cluster.delete_smem("s1")
        await eventually(lambda: cluster.smem("s1") is None, what="gone at once")
    assert "DeletingPod" not in cluster.event_reasons("s1")


async def test_a_spec_change_after_start_is_reported_not_applied(cluster: Cluster) -> None:
    await with_secret(cluster)

    body = smem_body("s1")
    async with run_operator(cluster):
        await running_session(cluster, body)
        changed = json.loads(json.dumps(body["spec"]["template"]))
        changed["spec"]["containers"][0]["args"] = ["--task", "other"]
        await cluster.patch_smem_spec("s1", {"template": changed})
        applied = await eventually(lambda: spec_applied(cluster), what="SpecApplied")
        assert applied["status"] == "False" and applied["reason"] == "SpecChangeNotApplied"
        assert "immutable" in applied["message"] and applied["observedGeneration"] == 2
        await eventually(lambda: "SpecChangeNotApplied" in cluster.event_reasons("s1"))
        assert cluster.smem_status("s1")["observedGeneration"] == 2
        await cluster.patch_smem_spec("s1", {"template": body["spec"]["template"]})  # changed back
        applied = await eventually(
            lambda: (spec_applied(cluster) or {}).get("status") == "True" and spec_applied(cluster)
        )
    assert applied["reason"] == "SpecApplied" and applied["observedGeneration"] == 3


def spec_applied(cluster: Cluster) -> dict[str, Any] | None:
    for entry in cluster.smem_status("s1").get("conditions") or []:
        if entry["type"] == "SpecApplied":
            result: dict[str, Any] = entry
            return result
    return None


async def test_a_namespace_whose_grants_are_gone_is_reported_and_released_never_an_exit(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's RoleBinding in the namespace is gone while a session is deleted (the namespace is being
    deleted): its Pods may no longer be read or watched. The session is released (recorded
    NamespaceAccessLost, its finalizer removed), the watch's 403 is a logged, reported condition, and the
    operator keeps running (``run_operator`` fails the test on a crash)."""
    monkeypatch.setattr(forbidden, "RETRY_SECONDS", 0.2)
    await with_secret(cluster)

    # watches end after 2 s here, so the re-list that meets the 403 comes soon
    async with run_operator(cluster, settings=fast_settings(server_timeout=2)):
        await running_session(cluster, smem_body("s1"))
        cluster.kmock.forbidden = frozenset({POD_RES})  # type: ignore[attr-defined]
        await cluster.delete_smem("s1")
        await eventually(lambda: cluster.smem("s1") is None, what="released", timeout=30)
        gauge = metrics.WATCH_FORBIDDEN.labels(namespace=cluster.namespace, resource="pods")
        await eventually(lambda: gauge._value.get() == 1, what="the forbidden watch reported", timeout=30)
        cluster.kmock.forbidden = frozenset()  # type: ignore[attr-defined]
        await eventually(lambda: gauge._value.get() == 0, what="access back", timeout=30)
    final = cluster.last_smem("s1")["status"]
    assert cond(final, "Ready")["reason"] == "NamespaceAccessLost"
    assert cond(final, "Flushed")["reason"] == "FlushNotReported"


async def test_the_start_deadline_of_a_restart_counts_from_the_restart(cluster: Cluster) -> None:
    """A restarted session gets its start deadline again, from the restart (a long session is not timed out
    at once)."""
    await with_secret(cluster)
    first, second = pod_name_for("s1"), pod_name_for("s1", 1)
    async with run_operator(cluster, dataclasses.replace(FAST, start_deadline=3.0)):
        await running_session(cluster, smem_body("s1", onInterruption="Restart"))
        await _sleep(4.0)  # longer than the start deadline since creation
        await cluster.set_pod_status(first, evicted())
        await eventually(lambda: cluster.pod(second), what="the restart's Pod")
        waiting = pod_status("Pending", [running("memsync-mount")], [])
        await cluster.set_pod_status(second, waiting)
        await _sleep(0.5)
        assert cluster.smem_status("s1")["phase"] != "Failed"  # not timed out at once
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="timed out", timeout=30)
    assert cond(status, "Ready")["reason"] == "StartTimeout"
    assert "memsync-mount still downloading" in cond(status, "Ready")["message"]


async def _sleep(seconds: float) -> None:

    await asyncio.sleep(seconds)
