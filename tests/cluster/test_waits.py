"""Sessions that cannot start yet, on a real API server and scheduler: a Pod no node takes (the scheduler's
verdict mirrored, then ``StartTimeout`` at the start deadline, the Pod deleted, the finalizer gone), and
a ResourceQuota or a LimitRange that refuses the Pod (a wait, retried, that starts once the namespace's
policy changes; the memsync containers' ephemeral-storage request and limit fit a LimitRange whose default
limit is below their request and a ``limits.ephemeral-storage`` quota). Each asserts the SessionMemory's end
and the store's: nothing written before is lost, nothing is written by a session that never ran."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import RunningStoreServer
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.models import FINALIZER

from .conftest import Cluster
from .scenario import (
    FINAL,
    agent,
    agent_report,
    assert_final_store,
    condition,
    make_store,
    smem_status,
    start_session,
    store_files,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def warnings_of(cluster: Cluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("-n", namespace, "events")["items"]
    return [
        e
        for e in items
        if e["involvedObject"]["name"] == name and e["reason"] == reason and e["type"] == "Warning"
    ]


def finalizers(cluster: Cluster, namespace: str, name: str) -> list[str]:
    obj = cluster.get_or_none("-n", namespace, "smem", name) or {}
    return list(obj.get("metadata", {}).get("finalizers") or [])


def waiting_reason(cluster: Cluster, namespace: str, name: str) -> str | None:
    status = smem_status(cluster, namespace, name)
    try:
        return str(condition(status, "Ready")["reason"])
    except KeyError:
        return None


async def test_an_unschedulable_pod_times_out_at_the_start_deadline(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """No node matches the template's nodeSelector: the scheduler's PodScheduled=False is mirrored into the
    Scheduled condition while the session waits; at startDeadlineSeconds it fails with StartTimeout naming
    that, its Pod is deleted, a Warning Event says so, and the finalizer goes with the recorded outcome."""
    seeded = {"/keep.md": "written before the session"}
    store = await make_store(tier_store, "unschedulable", seeded)
    before = await store_files(tier_store, store)
    await start_session(
        deployed,
        tier_store,
        namespace,
        "nowhere",
        stores=[(store, "n", "read_write")],
        sandbox=agent("--duration", "5"),
        pod_spec={"nodeSelector": {"memsync.dev/pool": "does-not-exist"}},
        spec={"startDeadlineSeconds": 20},
    )
    pod = pod_name_for("nowhere")
    scheduled = deployed.wait(
        "the Scheduled condition",
        lambda: next(
            (
                c
                for c in smem_status(deployed, namespace, "nowhere").get("conditions") or []
                if c["type"] == "Scheduled" and c["status"] == "False"
            ),
            None,
        ),
        60,
        explain=deployed.dump,
    )
    assert scheduled["reason"] == "Unschedulable", scheduled
    assert "node affinity/selector" in scheduled["message"], scheduled
    status = wait_phase(deployed, namespace, "nowhere", ("Failed",), timeout=120)
    ready = condition(status, "Ready")
    assert ready["reason"] == "StartTimeout", status
    assert "did not start within 20 s" in ready["message"] and "node affinity/selector" in ready["message"]
    assert condition(status, "Flushed")["reason"] == "NothingToFlush"
    deployed.wait("the Pod deleted", lambda: deployed.get_or_none("-n", namespace, "pod", pod) is None, 60)
    deployed.wait(
        "a StartTimeout Event", lambda: warnings_of(deployed, namespace, "nowhere", "StartTimeout"), 60
    )
    deployed.wait(
        "the finalizer removed", lambda: FINALIZER not in finalizers(deployed, namespace, "nowhere"), 60
    )
    assert await store_files(tier_store, store) == before


def quota(namespace: str, hard: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "sessions", "namespace": namespace},
        "spec": {"hard": hard},
    }


async def test_a_full_quota_is_waited_for_and_the_session_starts_once_it_frees_up(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    deployed.apply(quota(namespace, {"pods": "0"}))
    deployed.wait(
        "the quota's status",
        lambda: (deployed.get("-n", namespace, "resourcequota", "sessions").get("status") or {}).get("hard"),
    )
    store = await make_store(tier_store, "quota-wait", {})
    await start_session(
        deployed,
        tier_store,
        namespace,
        "waits",
        stores=[(store, "n", "read_write")],
        sandbox=agent("--duration", "4", "--interval", "0.5"),
    )
    deployed.wait(
        "QuotaExceeded",
        lambda: waiting_reason(deployed, namespace, "waits") == "QuotaExceeded",
        60,
        explain=deployed.dump,
    )
    status = smem_status(deployed, namespace, "waits")
    assert status["phase"] == "Pending" and "exceeded quota" in status["message"], status
    assert deployed.get("-n", namespace, "pods")["items"] == []
    assert FINALIZER in finalizers(deployed, namespace, "waits")
    deployed.wait(
        "a QuotaExceeded Event", lambda: warnings_of(deployed, namespace, "waits", "QuotaExceeded"), 60
    )
    deployed.apply(quota(namespace, {"pods": "1"}))  # a session elsewhere in the namespace ended
    status = wait_phase(deployed, namespace, "waits", FINAL, timeout=180)
    assert status["phase"] == "Succeeded", status
    report = agent_report(deployed, namespace, pod_name_for("waits"))
    assert_final_store(await store_files(tier_store, store), report, "n", status)
    deployed.wait(
        "the finalizer removed", lambda: FINALIZER not in finalizers(deployed, namespace, "waits"), 60
    )


async def test_a_limit_range_is_waited_for_and_ephemeral_storage_fits_its_defaults_and_a_quota(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """A LimitRange whose default ephemeral-storage limit (500Mi) is below the memsync containers' request
    (1Gi), a maximum (1Gi) below their limit (2Gi), and a ``limits.ephemeral-storage`` quota (every
    container must declare a limit). The maximum refuses the Pod: a wait (QuotaExceeded, the API's
    message). Once the maximum is raised the Pod is admitted: the memsync containers keep their own
    request and limit (the default applies to the sandbox only, which sets none) and the quota counts them."""
    limits = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "storage", "namespace": namespace},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"ephemeral-storage": "500Mi"},
                    "defaultRequest": {"ephemeral-storage": "100Mi"},
                    "max": {"ephemeral-storage": "1Gi"},
                }
            ]
        },
    }
    deployed.apply(limits)
    deployed.apply(quota(namespace, {"limits.ephemeral-storage": "20Gi"}))
    store = await make_store(tier_store, "limit-range", {})
    await start_session(
        deployed,
        tier_store,
        namespace,
        "limited",
        stores=[(store, "n", "read_write")],
        sandbox=agent("--duration", "4", "--interval", "0.5"),
    )
    deployed.wait(
        "QuotaExceeded (the LimitRange's maximum)",
        lambda: waiting_reason(deployed, namespace, "limited") == "QuotaExceeded",
        60,
        explain=deployed.dump,
    )
    message = smem_status(deployed, namespace, "limited")["message"]
    assert "maximum ephemeral-storage usage per Container is 1Gi" in message, message
    limits["spec"]["limits"][0]["max"] = {"ephemeral-storage": "4Gi"}
    deployed.apply(limits)
    pod = pod_name_for("limited")
    deployed.wait(
        "the Pod", lambda: deployed.get_or_none("-n", namespace, "pod", pod), 120, explain=deployed.dump
    )
    spec = deployed.get("-n", namespace, "pod", pod)["spec"]
    storage = {
        c["name"]: (
            c["resources"]["requests"]["ephemeral-storage"],
            c["resources"]["limits"]["ephemeral-storage"],
        )
        for c in spec["initContainers"] + spec["containers"]
    }
    assert storage == {
        "memsync-mount": ("1Gi", "2Gi"),
        "memsync-sync": ("1Gi", "2Gi"),
        "sandbox": ("100Mi", "500Mi"),
    }, storage
    status = wait_phase(deployed, namespace, "limited", FINAL, timeout=180)
    assert status["phase"] == "Succeeded", status
    assert_final_store(
        await store_files(tier_store, store), agent_report(deployed, namespace, pod), "n", status
    )
    used = deployed.get("-n", namespace, "resourcequota", "sessions")["status"]
    assert used["hard"]["limits.ephemeral-storage"] == "20Gi"
