"""A session on its way to a running sandbox (kopf against the emulated API): a quota or a LimitRange that
refuses its Pod is a wait, retried, not a failure; a Pod that no node takes shows why in the ``Scheduled``
condition; past the start deadline the session fails with ``StartTimeout`` naming what it waited for, its
Pod is deleted, and its finalizer goes with the recorded outcome."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import kmock as km
import pytest
from smem_harness import FAST, RUNNING_POD, Cluster, eventually, pod_status, run_operator, smem_body
from test_lifecycle import cond, phase_is, with_secret

from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.models import FINALIZER

QUOTA = (
    'pods "s1-sandbox" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=4, '
    "limited: pods=4"
)
LIMIT_RANGE = (
    'pods "s1-sandbox" is forbidden: maximum ephemeral-storage usage per Container is 500Mi, but limit is 2Gi'
)
UNSCHEDULABLE = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."


def forbidden(message: str) -> km.KubernetesError:
    return km.KubernetesError(status=403, reason="Forbidden", message=message)


def finalizers(cluster: Cluster, name: str) -> list[str]:
    return list(((cluster.smem(name) or {}).get("metadata") or {}).get("finalizers") or [])


@pytest.mark.parametrize("message", [QUOTA, LIMIT_RANGE], ids=["resource-quota", "limit-range"])
async def test_a_quota_or_limit_range_refusal_waits_then_starts(cluster: Cluster, message: str) -> None:
    await with_secret(cluster)
    cluster.kmock.reject_pod_creates = forbidden(message)  # type: ignore[attr-defined]
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
        ready = cond(status, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "QuotaExceeded"
        assert message.split(": ", 1)[1] in ready["message"] and "start deadline" in ready["message"]
        assert "podName" not in status and cluster.pods() == []
        warning = await eventually(
            lambda: next((e for e in cluster.events("s1") if e["reason"] == "QuotaExceeded"), None),
            what="a QuotaExceeded event",
        )
        assert warning["type"] == "Warning"
        # retried with a backoff while waiting (2 s, then 4 s ... up to the re-check interval)
        await eventually(lambda: cluster.kmock.rejected >= 3, what="retries")  # type: ignore[attr-defined]
        assert FINALIZER in finalizers(cluster, "s1")  # a wait is not an outcome
        cluster.kmock.reject_pod_creates = None  # type: ignore[attr-defined]
        await eventually(lambda: cluster.pod(pod_name_for("s1")), what="the Pod once the quota frees up")
        await cluster.set_pod_status(pod_name_for("s1"), RUNNING_POD)
        status = await eventually(phase_is(cluster, "s1", "Running"), what="Running")
    assert [e["reason"] for e in cluster.events("s1")].count("QuotaExceeded") == 1


async def test_a_quota_wait_ends_at_the_start_deadline(cluster: Cluster) -> None:
    await with_secret(cluster)
    cluster.kmock.reject_pod_creates = forbidden(QUOTA)  # type: ignore[attr-defined]
    async with run_operator(cluster, dataclasses.replace(FAST, start_deadline=3.0)):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed", timeout=30)
        ready = cond(status, "Ready")
        assert ready["reason"] == "StartTimeout"
        assert "did not start within 3 s" in ready["message"] and "exceeded quota" in ready["message"]
        assert cond(status, "Flushed")["reason"] == "NothingToFlush"
        await eventually(lambda: "StartTimeout" in cluster.event_reasons("s1"), what="a StartTimeout event")
        # the outcome is recorded: the finalizer goes, and nothing is retried any more
        await eventually(lambda: FINALIZER not in finalizers(cluster, "s1"), what="the finalizer removed")
        rejected = cluster.kmock.rejected  # type: ignore[attr-defined]
        cluster.kmock.reject_pod_creates = None  # type: ignore[attr-defined]
        await asyncio.sleep(2.0)  # several re-checks (every 0.5 s here): none creates a Pod
    assert cluster.pods() == [] and rejected >= 1


def unschedulable(message: str = UNSCHEDULABLE) -> dict[str, Any]:
    status = pod_status("Pending", [], [])
    status["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    return status


async def test_an_unschedulable_pod_is_shown_then_timed_out_and_deleted(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod = pod_name_for("s1")
    async with run_operator(cluster, dataclasses.replace(FAST, start_deadline=4.0)):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod), what="the Pod")
        await cluster.set_pod_status(pod, unschedulable())
        scheduled = await eventually(
            lambda: next(
                (c for c in cluster.smem_status("s1").get("conditions") or [] if c["type"] == "Scheduled"),
                None,
            ),
            what="the Scheduled condition",
        )
        assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
            "False",
            "Unschedulable",
            UNSCHEDULABLE,
        )
        assert "waits for a node" in cluster.smem_status("s1")["message"]
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed", timeout=30)
        ready = cond(status, "Ready")
        assert ready["reason"] == "StartTimeout" and UNSCHEDULABLE in ready["message"]
        assert status["podName"] == pod
        await eventually(lambda: (cluster.pod(pod) or {}).get("metadata", {}).get("deletionTimestamp"))
        await eventually(lambda: "StartTimeout" in cluster.event_reasons("s1"), what="a StartTimeout event")
        # the kubelet ends the Pod: the verdict stands
        await cluster.remove_pod(pod)
        await eventually(lambda: cluster.pod(pod) is None)
        assert cond(cluster.smem_status("s1"), "Ready")["reason"] == "StartTimeout"


async def test_a_scheduled_pod_reports_its_node(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod), what="the Pod")
        await cluster.bind_pod(pod, "node-a")
        running = dict(RUNNING_POD)
        running["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        await cluster.set_pod_status(pod, running)
        status = await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        assert has_condition(status, "Scheduled", "True", "node-a")


def has_condition(status: dict[str, Any], kind: str, value: str, word: str) -> bool:
    found = cond(status, kind)
    return found["status"] == value and word in found["message"]


async def test_a_pod_left_by_an_earlier_sessionmemory_of_the_name_is_waited_for(cluster: Cluster) -> None:
    """A SessionMemory deleted and created again while its old Pod still ends (its node lost, say): the new
    one waits (``PreviousPodTerminating``) instead of failing on the name, and starts once it is gone."""
    await with_secret(cluster)
    pod = pod_name_for("s1")
    async with run_operator(cluster, dataclasses.replace(FAST, delete_timeout_seconds=1.0)):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod), what="the first Pod")
        first_uid = cluster.pod(pod)["metadata"]["uid"]  # type: ignore[index]
        await cluster.set_pod_status(pod, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        await cluster.delete_smem("s1")
        await eventually(lambda: (cluster.pod(pod) or {}).get("metadata", {}).get("deletionTimestamp"))
        # the old Pod never ends (its node is gone); the deletion gives up on it after its bound
        # (delete_timeout_seconds here), and a new SessionMemory of the same name arrives
        await eventually(lambda: cluster.smem("s1") is None, what="the old one released", timeout=30)
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(
            lambda: cond_reason(cluster, "s1") == "PreviousPodTerminating" and cluster.smem_status("s1"),
            what="waiting for the old Pod",
        )
        assert status["phase"] == "Pending" and pod in status["message"]
        await cluster.remove_pod(pod)
        await eventually(
            lambda: (cluster.pod(pod) or {}).get("metadata", {}).get("uid") not in (None, first_uid),
            what="the new Pod",
        )


def cond_reason(cluster: Cluster, name: str) -> str | None:
    for entry in cluster.smem_status(name).get("conditions") or []:
        if entry["type"] == "Ready":
            return str(entry["reason"])
    return None
