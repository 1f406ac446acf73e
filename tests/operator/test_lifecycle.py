"""The controller end to end against the emulated API: kopf really runs, the test plays the kubelet.

Every assertion is on end state (objects, statuses, events), reached through ``eventually``; no test counts
handler calls (kopf may run a handler more than once, and the controller must not care).
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from smem_harness import (
    AGENT_IMAGE,
    FAST,
    FIRST_STORE_RESULT,
    MOUNTED,
    NAMESPACE,
    RUNNING_POD,
    Cluster,
    eventually,
    flushed,
    pod_status,
    run_operator,
    running,
    smem_body,
    terminated,
    waiting,
)

from memsync.controller.sessionmemory.pod import build_sandbox_pod, pod_name_for
from memsync.controller.settings import ControllerConfig
from memsync.crd.models import FINALIZER, validate_spec

SECRET_VALUE = "eyJzZXNzaW9uc190b2tlbiI6InNrLWFudC1yZXEtc2VjcmV0LWRvLW5vdC1sZWFrIn0"
FLUSHED = flushed()
ALREADY_EXISTS = "something already exists at the memory store's path: /mnt/memory/user-preferences"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def has(mapping: dict[str, Any], expected: dict[str, Any]) -> bool:
    """``mapping`` holds every key of ``expected`` with the same value."""
    return all(mapping.get(k) == v for k, v in expected.items())


def status_where(cluster: Cluster, name: str, predicate: Any) -> dict[str, Any] | None:
    status = cluster.smem_status(name)
    return status if predicate(status) else None


def phase_is(cluster: Cluster, name: str, phase: str) -> Any:
    return lambda: status_where(cluster, name, lambda s: s.get("phase") == phase)


async def with_secret(cluster: Cluster, name: str = "work-secret") -> None:
    await cluster.create_secret(name, {"secret": b64(SECRET_VALUE)})


# --------------------------------------------------------------------------------------------------


async def test_full_lifecycle_create_run_delete(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        created = await cluster.create_smem(smem_body("s1"))
        uid = created["metadata"]["uid"]

        # The Pod: exactly the builder's Pod, owned by the SessionMemory, the secret only as a reference.
        pod = await eventually(lambda: cluster.pod(pod_name), what="the sandbox Pod")
        expected = build_sandbox_pod(
            name="s1",
            namespace=NAMESPACE,
            uid=uid,
            spec=validate_spec(created["spec"]),
            agent_image=AGENT_IMAGE,
        )
        assert pod["spec"] == expected["spec"]
        assert pod["metadata"]["labels"] == expected["metadata"]["labels"]
        assert pod["metadata"]["ownerReferences"] == expected["metadata"]["ownerReferences"]
        assert pod["metadata"]["ownerReferences"][0]["uid"] == uid
        refs = [
            env["valueFrom"]["secretKeyRef"]
            for c in pod["spec"]["initContainers"]
            for env in c["env"]
            if env["name"] == "ANTHROPIC_WORK_SECRET"
        ]
        assert refs == [{"name": "work-secret", "key": "secret", "optional": False}] * 2
        assert SECRET_VALUE not in json.dumps(pod) and b64(SECRET_VALUE) not in json.dumps(pod)

        status = await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
        assert status["podName"] == pod_name
        assert status["observedGeneration"] == 1
        assert cond(status, "Ready")["status"] == "False"
        assert [s["memoryStoreId"] for s in status["stores"]] == ["memstore_01aa", "memstore_02bb"]
        assert status["stores"][0]["mountPath"] == "/mnt/memory/user-preferences"
        assert FINALIZER in (cluster.smem("s1") or {})["metadata"]["finalizers"]

        # The kubelet starts memsync-mount.
        await cluster.set_pod_status(
            pod_name,
            pod_status("Pending", [running("memsync-mount"), waiting("memsync-sync")], [waiting("sandbox")]),
        )
        status = await eventually(phase_is(cluster, "s1", "Mounting"), what="Mounting")
        assert cond(status, "StoresMounted")["reason"] == "Mounting"

        # memsync-mount reports what it mounted; the sidecar starts (not ready yet).
        await cluster.set_pod_status(
            pod_name,
            pod_status(
                "Pending",
                [
                    terminated("memsync-mount", 0, MOUNTED, finished="2026-01-01T00:01:00Z"),
                    running("memsync-sync"),
                ],
                [waiting("sandbox")],
            ),
        )
        status = await eventually(
            lambda: (
                cluster.smem_status("s1")
                if cond(cluster.smem_status("s1"), "StoresMounted").get("status") == "True"
                else None
            ),
            what="StoresMounted",
        )
        assert status["phase"] == "Mounting"
        assert [s.get("memoriesMounted") for s in status["stores"]] == [12, 3]
        assert status["lastSyncTime"] == "2026-01-01T00:01:00Z"
        mounted_since = cond(status, "StoresMounted")["lastTransitionTime"]

        # Sidecar ready, sandbox running.
        await cluster.set_pod_status(
            pod_name,
            pod_status(
                "Running",
                [
                    terminated("memsync-mount", 0, MOUNTED, finished="2026-01-01T00:01:00Z"),
                    running("memsync-sync", ready=True),
                ],
                [running("sandbox", ready=True)],
            ),
        )
        status = await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        assert cond(status, "Ready")["status"] == "True"
        assert cond(status, "Flushed")["status"] == "Unknown"
        assert cond(status, "StoresMounted")["lastTransitionTime"] == mounted_since  # no flip, no new time

        # Delete: the operator deletes the Pod gracefully and waits.
        await cluster.delete_smem("s1")
        pod = await eventually(
            lambda: (p := cluster.pod(pod_name)) and p["metadata"].get("deletionTimestamp") and p,
            what="the Pod to be terminating",
        )
        assert (
            pod["metadata"]["deletionGracePeriodSeconds"] == expected["spec"]["terminationGracePeriodSeconds"]
        )
        await eventually(phase_is(cluster, "s1", "Flushing"), what="Flushing")
        assert cluster.smem("s1") is not None, "released before the Pod was gone"

        # The kubelet: the sandbox ends, the sidecar runs its final flush and reports it; the Pod goes.
        await cluster.set_pod_status(
            pod_name,
            pod_status(
                "Succeeded",
                [
                    terminated("memsync-mount", 0, MOUNTED, finished="2026-01-01T00:01:00Z"),
                    terminated("memsync-sync", 0, FLUSHED, finished="2026-01-01T00:30:00Z"),
                ],
                [terminated("sandbox", 143)],
            ),
        )
        await cluster.remove_pod(pod_name)
        await eventually(lambda: cluster.smem("s1") is None, what="the SessionMemory to be released")
        await eventually(lambda: "Succeeded" in cluster.event_reasons("s1"), what="the Succeeded event")
        reasons = cluster.event_reasons("s1")
        for reason in (
            "PodCreated",
            "Pending",
            "Mounting",
            "Running",
            "DeletingPod",
            "Flushing",
            "Succeeded",
        ):
            assert reason in reasons, reasons

    final = cluster.last_smem("s1")["status"]
    assert final["phase"] == "Succeeded", final
    assert cond(final, "Flushed")["status"] == "True"
    assert cond(final, "Flushed")["reason"] == "FlushComplete"
    assert final["stores"][0] == FIRST_STORE_RESULT
    assert final["lastSyncTime"] == "2026-01-01T00:30:00Z"
    assert cluster.pods() == []
    for event in cluster.events():
        assert SECRET_VALUE not in json.dumps(event)


async def test_pod_that_ends_by_itself_succeeds_or_fails(cluster: Cluster) -> None:
    await with_secret(cluster)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("ok"))
        await cluster.create_smem(smem_body("bad", session_id="sesn_other"))
        for name in ("ok", "bad"):
            await eventually(lambda n=name: cluster.pod(pod_name_for(n)), what=f"Pod of {name}")
        mount = terminated("memsync-mount", 0, MOUNTED)
        incomplete = flushed(
            False, memstore_01aa={"uploaded": 1, "deleted": 0, "conflicts": 1, "refused": 1, "unsent": 2}
        )
        await cluster.set_pod_status(
            pod_name_for("ok"),
            pod_status(
                "Succeeded", [mount, terminated("memsync-sync", 0, FLUSHED)], [terminated("sandbox", 0)]
            ),
        )
        await cluster.set_pod_status(
            pod_name_for("bad"),
            pod_status(
                "Failed", [mount, terminated("memsync-sync", 1, incomplete)], [terminated("sandbox", 3)]
            ),
        )
        ok = await eventually(phase_is(cluster, "ok", "Succeeded"), what="ok Succeeded")
        assert has(cond(ok, "Ready"), {"status": "False", "reason": "SessionSucceeded"})
        bad = await eventually(phase_is(cluster, "bad", "Failed"), what="bad Failed")
        assert cond(bad, "Ready")["reason"] == "SandboxFailed"
        assert "exited with code 3" in bad["message"]
        assert has(cond(bad, "Flushed"), {"status": "False", "reason": "FlushIncomplete"})
        assert "unsent in memstore_01aa" in cond(bad, "Flushed")["message"]
        assert bad["stores"][0]["unsent"] == 2 and bad["stores"][0]["conflicts"] == 1
        await eventually(lambda: "SandboxFailed" in cluster.event_reasons("bad"), what="a Warning event")
        warning = next(e for e in cluster.events("bad") if e["reason"] == "SandboxFailed")
        assert warning["type"] == "Warning"
        # A session runs once: an ended Pod is not replaced.
        assert cluster.pod_ever_created(pod_name_for("ok")) == 1


async def test_missing_secret_refuses_then_starts_when_it_appears(cluster: Cluster) -> None:
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1", secret="work-late"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready = cond(status, "Ready")
        assert ready["reason"] == "SecretNotFound"
        assert "work-late" in ready["message"] and "spec.workItemSecretRef.name" in ready["message"]
        assert status["message"] == ready["message"]
        assert "podName" not in status
        assert cluster.pods() == []
        await eventually(lambda: "SecretNotFound" in cluster.event_reasons("s1"), what="a Warning event")

        # The Secret appears (GitOps applied it a little later): the re-check starts the session.
        await with_secret(cluster, "work-late")
        status = await eventually(
            phase_is(cluster, "s1", "Pending"), what="Pending after the Secret appeared"
        )
        assert status["podName"] == pod_name_for("s1")
        assert cond(status, "Ready")["reason"] == "PodPending"
        assert len(cluster.pods()) == 1


async def test_secret_without_the_key_is_refused(cluster: Cluster) -> None:
    await cluster.create_secret("work-secret", {"other": b64(SECRET_VALUE)})
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready = cond(status, "Ready")
        assert ready["reason"] == "SecretKeyNotFound"
        assert "work-secret" in ready["message"] and "no key secret" in ready["message"]
        assert SECRET_VALUE not in json.dumps(status) and b64(SECRET_VALUE) not in json.dumps(status)
        assert cond(status, "Flushed")["reason"] == "NothingToFlush"
        assert cluster.pods() == []


async def test_invalid_spec_that_slipped_past_the_schema_is_refused(cluster: Cluster) -> None:
    await with_secret(cluster)
    body = smem_body("s1", sync={"intervalSeconds": 2})
    body["spec"]["stores"].append({"memoryStoreId": "memstore_01aa", "name": "Again"})
    async with run_operator(cluster):
        await cluster.create_smem(body)
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        ready = cond(status, "Ready")
        assert ready["reason"] == "InvalidSpec"
        assert "spec.sync.intervalSeconds" in ready["message"]
        assert "spec.stores" in ready["message"] and "memstore_01aa" in ready["message"]
        assert cluster.pods() == []

        # Fixing the spec lets it start (the refusal is re-evaluated).
        fixed = smem_body("s1")["spec"]
        await cluster.patch_smem_spec("s1", {"sync": fixed["sync"], "stores": fixed["stores"]})
        status = await eventually(phase_is(cluster, "s1", "Pending"), what="Pending after the fix")
        assert status["observedGeneration"] == 2
        assert all(c.get("observedGeneration") == 2 for c in status["conditions"])


async def test_duplicate_session_is_refused_and_the_older_keeps_running(cluster: Cluster) -> None:
    await with_secret(cluster)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("first", session_id="sesn_dup"))
        await eventually(lambda: cluster.pod(pod_name_for("first")), what="the first Pod")
        await cluster.create_smem(smem_body("second", session_id="sesn_dup"))
        status = await eventually(phase_is(cluster, "second", "Failed"), what="the duplicate refused")
        ready = cond(status, "Ready")
        assert ready["reason"] == "DuplicateSession"
        assert "first" in ready["message"] and "sesn_dup" in ready["message"]
        assert cluster.pod(pod_name_for("second")) is None
        assert [p["metadata"]["name"] for p in cluster.pods()] == [pod_name_for("first")]
        assert cluster.smem_status("first")["phase"] == "Pending"

        # Once the older one is gone, the session is free: the newer one starts (level-based).
        await cluster.delete_smem("first")
        await eventually(
            lambda: (p := cluster.pod(pod_name_for("first"))) and p["metadata"].get("deletionTimestamp"),
            what="the first Pod terminating",
        )
        await cluster.remove_pod(pod_name_for("first"))
        await eventually(lambda: cluster.smem("first") is None, what="the first released")
        await eventually(lambda: cluster.pod(pod_name_for("second")), what="the second Pod")


async def test_operator_restart_adopts_the_existing_pod(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
    first_uid = (cluster.pod(pod_name) or {})["metadata"]["uid"]

    # While the operator is down, the Pod moves on.
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    async with run_operator(cluster):
        status = await eventually(phase_is(cluster, "s1", "Running"), what="Running after the restart")
        assert status["podName"] == pod_name
        await eventually(lambda: "PodAdopted" in cluster.event_reasons("s1"), what="PodAdopted")
    assert cluster.pod_ever_created(pod_name) == 1
    assert (cluster.pod(pod_name) or {})["metadata"]["uid"] == first_uid
    assert len(cluster.pods()) == 1


async def test_mount_failure_surfaces_the_init_containers_message(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    failure = json.dumps({"phase": "mount_failed", "store": "memstore_01aa", "error": ALREADY_EXISTS})
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod_name), what="the Pod")
        await cluster.set_pod_status(
            pod_name,
            pod_status(
                "Failed",
                [terminated("memsync-mount", 1, failure), waiting("memsync-sync")],
                [waiting("sandbox")],
            ),
        )
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        assert has(cond(status, "Ready"), {"reason": "MountFailed", "message": ALREADY_EXISTS})
        assert has(
            cond(status, "StoresMounted"),
            {
                "status": "False",
                "reason": "MountFailed",
                "message": ALREADY_EXISTS,
            },
        )
        assert cond(status, "Flushed")["reason"] == "NothingToFlush"
        assert status["message"] == ALREADY_EXISTS
        await eventually(lambda: "MountFailed" in cluster.event_reasons("s1"), what="the MountFailed event")
        event = next(e for e in cluster.events("s1") if e["reason"] == "MountFailed")
        assert event["type"] == "Warning" and event["message"] == ALREADY_EXISTS


async def test_a_sidecar_that_never_starts_fails_the_session_and_its_pod_goes(cluster: Cluster) -> None:
    """A kubelet with the native-sidecar startup defect leaves memsync-sync running but never "started":
    past ``sync.sidecarStartSeconds`` after the mount, the periodic re-check fails the session
    (``SidecarNotStarted``, a Warning Event) and deletes the Pod; the Pod's end does not change that."""
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    mounted_at = (datetime.now(UTC) - timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sync = {"intervalSeconds": 15, "finalFlushSeconds": 30, "sidecarStartSeconds": 10}
    unstarted = {**running("memsync-sync"), "started": False, "restartCount": 1}
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1", sync=sync))
        await eventually(lambda: cluster.pod(pod_name), what="the Pod")
        await cluster.set_pod_status(
            pod_name,
            pod_status(
                "Pending",
                [terminated("memsync-mount", 0, MOUNTED, finished=mounted_at), unstarted],
                [waiting("sandbox")],
            ),
        )
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        assert cond(status, "Ready")["reason"] == "SidecarNotStarted"
        assert "had not started 10 s after the stores were mounted" in status["message"]
        assert has(cond(status, "Flushed"), {"status": "True", "reason": "NothingToFlush"})
        await eventually(
            lambda: (cluster.pod(pod_name) or {}).get("metadata", {}).get("deletionTimestamp"),
            what="the Pod's deletion",
        )
        await eventually(lambda: "SidecarNotStarted" in cluster.event_reasons("s1"), what="the event")
        event = next(e for e in cluster.events("s1") if e["reason"] == "SidecarNotStarted")
        assert event["type"] == "Warning" and event["message"] == status["message"]
        await cluster.remove_pod(pod_name)
        await eventually(lambda: cluster.pod(pod_name) is None, what="the Pod gone")
    assert cluster.smem_status("s1") == status


async def test_a_pod_name_taken_by_someone_else_is_refused(cluster: Cluster) -> None:
    await with_secret(cluster)
    squatter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name_for("s1"), "namespace": NAMESPACE, "labels": {"app": "other"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    await cluster.request_json("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", squatter)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        assert cond(status, "Ready")["reason"] == "PodNameTaken"
        assert pod_name_for("s1") in status["message"]
        assert (cluster.pod(pod_name_for("s1")) or {})["metadata"]["labels"] == {"app": "other"}


async def test_spec_change_after_the_pod_started_is_recorded_not_applied(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
        before = cluster.pod(pod_name) or {}
        await cluster.patch_smem_spec(
            "s1", {"sync": {"intervalSeconds": 60, "deletions": "log_only", "finalFlushSeconds": 30}}
        )
        await eventually(lambda: "SpecChangeNotApplied" in cluster.event_reasons("s1"), what="the warning")
        status = await eventually(
            lambda: status_where(cluster, "s1", lambda s: s.get("observedGeneration") == 2),
            what="observedGeneration 2",
        )
        assert status["phase"] == "Pending"
        assert (cluster.pod(pod_name) or {})["spec"] == before["spec"]
        assert cluster.pod_ever_created(pod_name) == 1


async def test_a_pod_deleted_behind_the_operators_back_ends_the_session(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod_name), what="the Pod")
        await cluster.set_pod_status(pod_name, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        # Force-deleted: no final statuses ever reported.
        await cluster.request_json(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}", {"gracePeriodSeconds": 0}
        )
        await cluster.remove_pod(pod_name)
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        assert cond(status, "Ready")["reason"] == "PodLost"
        assert has(cond(status, "Flushed"), {"status": "False", "reason": "FlushNotReported"})
        # No second Pod for the same session.
        assert cluster.pod(pod_name) is None
        assert cluster.pod_ever_created(pod_name) == 1


async def test_deletion_gives_up_waiting_after_the_bound(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    config = ControllerConfig(
        agent_image=AGENT_IMAGE,
        recheck_interval=FAST.recheck_interval,
        delete_recheck_delay=0.2,
        delete_timeout_seconds=1.0,
        report_settle_seconds=0.5,
    )
    async with run_operator(cluster, config):
        await cluster.create_smem(smem_body("s1"))
        await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
        await cluster.delete_smem("s1")
        # The kubelet never confirms: the Pod stays terminating.
        await eventually(lambda: cluster.smem("s1") is None, what="the release after the bound")
        assert (cluster.pod(pod_name) or {})["metadata"].get("deletionTimestamp")
        await eventually(lambda: "FlushNotConfirmed" in cluster.event_reasons("s1"), what="the warning")
    final = cluster.last_smem("s1")["status"]
    assert final["phase"] == "Failed"
    assert cond(final, "Ready")["reason"] == "DeletionTimedOut"
    assert "gave up waiting for sandbox Pod s1-sandbox after 1s" in final["message"]


async def test_deleting_a_refused_session_releases_it_at_once(cluster: Cluster) -> None:
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1", secret="absent"))
        await eventually(phase_is(cluster, "s1", "Failed"), what="Failed")
        await cluster.delete_smem("s1")
        await eventually(lambda: cluster.smem("s1") is None, what="released")
        assert cluster.pods() == []


async def test_a_pod_that_vanishes_during_deletion_is_recorded_as_unconfirmed(cluster: Cluster) -> None:
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod_name), what="the Pod")
        await cluster.set_pod_status(pod_name, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        await cluster.delete_smem("s1")
        await eventually(phase_is(cluster, "s1", "Flushing"), what="Flushing")
        # The node dies: the Pod object goes away without final container statuses.
        await cluster.remove_pod(pod_name)
        await eventually(lambda: cluster.smem("s1") is None, what="released")
        # The outcome is recorded before the release (the finalizer goes with it), with a Warning Event.
        await eventually(lambda: "PodLost" in cluster.event_reasons("s1"), what="the warning")
    final = cluster.last_smem("s1")["status"]
    assert final["phase"] == "Failed"
    assert cond(final, "Ready")["reason"] == "PodLost"
    assert has(cond(final, "Flushed"), {"status": "False", "reason": "FlushNotReported"})


async def test_an_existing_pod_is_adopted_not_duplicated(cluster: Cluster) -> None:
    """A crash between creating the Pod and writing the status: the next run finds and adopts it."""
    await with_secret(cluster)
    created = await cluster.create_smem(smem_body("s1"))
    pod = build_sandbox_pod(
        name="s1",
        namespace=NAMESPACE,
        uid=created["metadata"]["uid"],
        spec=validate_spec(created["spec"]),
        agent_image=AGENT_IMAGE,
    )
    await cluster.request_json("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    async with run_operator(cluster):
        status = await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
        assert status["podName"] == pod_name_for("s1")
        await eventually(lambda: "PodAdopted" in cluster.event_reasons("s1"), what="PodAdopted")
        assert "PodCreated" not in cluster.event_reasons("s1")
    assert cluster.pod_ever_created(pod_name_for("s1")) == 1


async def test_a_lost_status_write_is_repaired_by_the_periodic_recheck(cluster: Cluster) -> None:
    """The Pod watcher's write of a Pod's end fails once (events are not retried): the session must not
    stay ``Running`` with no Pod; the periodic re-check of active sessions converges it."""
    await with_secret(cluster)
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod_name), what="the Pod")
        await cluster.set_pod_status(pod_name, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        await cluster.request_json(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}", {"gracePeriodSeconds": 0}
        )
        await eventually(phase_is(cluster, "s1", "Flushing"), what="Flushing")
        cluster.kmock.refuse_status_writes = 1  # type: ignore[attr-defined]
        await cluster.remove_pod(pod_name)  # DELETED: the watcher's one write of the Pod's end fails
        status = await eventually(phase_is(cluster, "s1", "Failed"), what="Failed after the lost write")
        assert cluster.kmock.refuse_status_writes == 0  # type: ignore[attr-defined]
        assert cond(status, "Ready")["reason"] == "PodLost"
        assert has(cond(status, "Flushed"), {"status": "False", "reason": "FlushNotReported"})
        assert cluster.pod_ever_created(pod_name) == 1


async def test_the_secret_value_is_never_in_logs_status_events_or_the_pod(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The operator reads the Secret only to check its key: its value must reach no log record (memsync's
    and kopf's, at DEBUG), no status, no Event and no Pod, on a whole session and on a refusal."""
    caplog.set_level(logging.DEBUG)
    await with_secret(cluster)
    await cluster.create_secret("work-other", {"wrong-key": b64(SECRET_VALUE)})
    pod_name = pod_name_for("s1")
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await cluster.create_smem(smem_body("s2", session_id="sesn_two", secret="work-other"))
        await eventually(lambda: cluster.pod(pod_name), what="the Pod")
        await cluster.set_pod_status(pod_name, RUNNING_POD)
        await eventually(phase_is(cluster, "s1", "Running"), what="Running")
        refused = await eventually(phase_is(cluster, "s2", "Failed"), what="s2 refused")
        assert cond(refused, "Ready")["reason"] == "SecretKeyNotFound"
        pods = cluster.pods()
        await cluster.delete_smem("s1")
        await eventually(
            lambda: (p := cluster.pod(pod_name)) and p["metadata"].get("deletionTimestamp"),
            what="terminating",
        )
        await cluster.set_pod_status(
            pod_name,
            pod_status(
                "Succeeded",
                [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, FLUSHED)],
                [terminated("sandbox", 0)],
            ),
        )
        await cluster.remove_pod(pod_name)
        await eventually(lambda: cluster.smem("s1") is None, what="released")
        await eventually(lambda: "Succeeded" in cluster.event_reasons("s1"), what="the Succeeded event")
        events = cluster.events()

    loggers = {r.name.split(".")[0] for r in caplog.records}
    assert {"memsync", "kopf"} <= loggers, loggers  # both were captured, at DEBUG
    assert any("work-other" in e.get("message", "") for e in events)  # the Secret was looked at
    leaks = (SECRET_VALUE, b64(SECRET_VALUE))
    for record in caplog.records:
        text = record.getMessage() + json.dumps(record.__dict__, default=str)
        assert not any(leak in text for leak in leaks), f"{record.name}: {record.getMessage()}"
    for where, obj in (
        ("events", events),
        ("pods", pods),
        ("s1", cluster.last_smem("s1")),
        ("s2", cluster.smem("s2")),
    ):
        dumped = json.dumps(obj)
        assert not any(leak in dumped for leak in leaks), where


async def test_pods_are_listed_and_watched_by_label_only(cluster: Cluster) -> None:
    await with_secret(cluster)
    async with run_operator(cluster):
        await cluster.create_smem(smem_body("s1"))
        await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
    pod_reads = [
        r for r in list(cluster.kmock) if r.method == "GET" and r.url.path.endswith("/pods") and r.params
    ]
    assert any(r.params.get("watch") == "true" for r in pod_reads), pod_reads
    for request in pod_reads:
        assert request.params.get("labelSelector") == "app.kubernetes.io/managed-by=memsync", request.url


async def test_cluster_wide_the_operator_never_reads_crds_or_namespaces(cluster: Cluster) -> None:
    """What lets the manifests' RBAC leave out CRDs and Namespaces: kopf and the controller never ask."""
    await with_secret(cluster)
    async with run_operator(cluster, clusterwide=True):
        await cluster.create_smem(smem_body("s1"))
        await eventually(phase_is(cluster, "s1", "Pending"), what="Pending")
    paths = {str(r.url.path) for r in list(cluster.kmock)}
    assert any(p.endswith("/sessionmemories") and "/namespaces/" not in p for p in paths), paths
    crd_reads = [p for p in paths if p.startswith("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")]
    # GET /api/v1/namespaces (list, watch) or /api/v1/namespaces/NAME (get); not a namespaced resource.
    namespace_reads = [
        p
        for p in paths
        if p.rstrip("/") == "/api/v1/namespaces"
        or (p.startswith("/api/v1/namespaces/") and p.count("/") == 4)
    ]
    assert crd_reads == [] and namespace_reads == [], (crd_reads, namespace_reads)
