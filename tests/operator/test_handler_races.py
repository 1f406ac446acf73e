"""Interleavings of the Pod watcher and the delete handler, forced one step at a time.

kopf is not running here: the test calls the handlers' own functions in the order that makes the race happen,
against the emulated API server (real HTTP), and plays the kubelet and kopf's finalizer bookkeeping itself.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncIterator

import kopf
import pytest
from smem_harness import (
    FAST,
    FIRST_STORE_RESULT,
    MOUNTED,
    NAMESPACE,
    RUNNING_POD,
    Cluster,
    flushed,
    pod_status,
    smem_body,
    terminated,
)

from memsync.controller import conditions
from memsync.controller.kube import KubeApi, KubeApiError
from memsync.controller.sessionmemory import finalize as sm_finalize
from memsync.controller.sessionmemory import ownership, podwatch
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory import reconcile as sm_reconcile
from memsync.controller.sessionmemory import state as sm_state
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.models import FINALIZER


async def _observe(runtime: sm_state.SessionMemories, event_type: str, pod: dict[str, object]) -> None:
    """One Pod event as the watcher sees it, its status derived at once (the watcher itself coalesces)."""
    key = podwatch.see_pod_event(runtime, event_type, pod)
    if key is not None:
        await podwatch.derive_from_seen_pod(runtime, key)


@pytest.fixture
async def runtime(cluster: Cluster) -> AsyncIterator[sm_state.SessionMemories]:
    kube = KubeApi.for_host(cluster.url)
    # No settling time: the delete handler decides as soon as it sees the Pod gone.
    yield sm_state.SessionMemories(kube=kube, config=dataclasses.replace(FAST, report_settle_seconds=0.0))
    kube.close()


async def test_the_final_flush_report_survives_a_failed_watcher_write(
    cluster: Cluster, runtime: sm_state.SessionMemories
) -> None:
    """The Pod ends with a complete flush report and is removed; the watcher's status write for that last
    event fails (and kopf does not retry event handlers). The delete handler, seeing the Pod gone, must
    record what the Pod reported, not "flush not reported"."""
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    body = smem_body("s1")
    body["metadata"]["finalizers"] = [FINALIZER]  # what kopf adds before any handler runs
    await cluster.create_smem(body)
    pod_name = pod_name_for("s1")

    await sm_reconcile.reconcile(runtime, cluster.smem("s1") or {})
    assert cluster.pod(pod_name) is not None
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    await _observe(runtime, "MODIFIED", cluster.pod(pod_name) or {})
    assert cluster.smem_status("s1")["phase"] == "Running"

    await cluster.delete_smem("s1")
    with pytest.raises(kopf.TemporaryError, match="waiting for sandbox Pod"):
        await sm_finalize.finalize(runtime, cluster.smem("s1") or {}, 0.0)
    terminating = cluster.pod(pod_name) or {}
    assert terminating["metadata"].get("deletionTimestamp")
    await _observe(runtime, "MODIFIED", terminating)
    assert cluster.smem_status("s1")["phase"] == "Flushing"

    # The kubelet: the sandbox ends, the sidecar reports a complete final flush, the Pod is removed.
    await cluster.set_pod_status(
        pod_name,
        pod_status(
            "Succeeded",
            [terminated("memsync-mount", 0, MOUNTED), terminated("memsync-sync", 0, flushed())],
            [terminated("sandbox", 143)],
        ),
    )
    last = cluster.pod(pod_name) or {}
    await cluster.remove_pod(pod_name)
    assert cluster.pod(pod_name) is None

    cluster.kmock.refuse_status_writes = 1  # type: ignore[attr-defined]
    with pytest.raises(KubeApiError):
        await _observe(runtime, "DELETED", last)
    assert cluster.smem_status("s1")["phase"] == "Flushing"  # the write was really lost

    await sm_finalize.finalize(runtime, cluster.smem("s1") or {}, 1.0)  # returns: the object may be released
    status = cluster.smem_status("s1")
    assert status["phase"] == "Succeeded", status
    flush_cond = next(c for c in status["conditions"] if c["type"] == "Flushed")
    assert (flush_cond["status"], flush_cond["reason"]) == ("True", "FlushComplete")
    assert status["stores"][0] == FIRST_STORE_RESULT


@pytest.mark.parametrize("secret_exists", [True, False])
async def test_a_reconcile_validates_the_spec_once(
    cluster: Cluster, runtime: sm_state.SessionMemories, monkeypatch: pytest.MonkeyPatch, secret_exists: bool
) -> None:
    """One reconcile (creating the Pod, or refusing for a missing Secret) validates the spec exactly once and
    hands the store paths on to its status write."""
    if secret_exists:
        await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body("s1"))
    calls: list[object] = []
    real = sm_reconcile.validate_spec

    def counting(raw: object) -> object:
        calls.append(raw)
        return real(raw)  # type: ignore[arg-type]

    monkeypatch.setattr(sm_reconcile, "validate_spec", counting)
    await sm_reconcile.reconcile(runtime, cluster.smem("s1") or {})
    assert len(calls) == 1
    status = cluster.smem_status("s1")
    assert [s["memoryStoreId"] for s in status["stores"]] == [
        s["memoryStoreId"] for s in smem_body("s1")["spec"]["stores"]
    ]
    assert all(s.get("mountPath", "").startswith("/mnt/memory/") for s in status["stores"]), status
    assert (cluster.pod(pod_name_for("s1")) is not None) == secret_exists


async def test_the_duplicate_check_reads_the_index_and_writes_start_from_the_known_object(
    cluster: Cluster, runtime: sm_state.SessionMemories, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With kopf's index of sessions the duplicate check lists nothing; a status write after the reconcile's
    own read or write reads nothing either, and a newer object (here a spec update) still wins: the write
    that started from the remembered object conflicts and is recomputed from a fresh read."""
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body("first", session_id="sesn_dup"))
    await cluster.create_smem(smem_body("second", session_id="sesn_dup"))
    first, second = cluster.smem("first") or {}, cluster.smem("second") or {}
    index: dict[tuple[str, str], list[dict[str, object]]] = {}
    for obj in (first, second):
        for key, claim in (ownership.session_claim(obj) or {}).items():
            index.setdefault(key, []).append(claim)

    async def no_listing(namespace: str) -> list[dict[str, object]]:
        raise AssertionError("the duplicate check listed the namespace")

    reads: list[str] = []
    real_get = runtime.kube.get_session_memory

    async def counting_get(namespace: str, name: str) -> dict[str, object] | None:
        reads.append(name)
        return await real_get(namespace, name)

    monkeypatch.setattr(runtime.kube, "list_session_memories", no_listing)
    monkeypatch.setattr(runtime.kube, "get_session_memory", counting_get)

    def claims(namespace: str, session_id: str) -> list[dict[str, object]]:
        return list(index.get((namespace, session_id), []))

    await sm_reconcile.reconcile(runtime, second, claims)
    ready = conditions.condition(cluster.smem_status("second"), ph.READY) or {}
    assert ready["reason"] == "DuplicateSession" and "first" in ready["message"]
    await sm_reconcile.reconcile(runtime, first, claims)
    pod_name = pod_name_for("first")
    assert cluster.pod(pod_name) is not None and cluster.pod(pod_name_for("second")) is None
    assert reads == ["second", "first"]  # one read per reconcile; its status writes read nothing more

    # The Pod watcher's event of the Pod just created: nothing changed, nothing read or written.
    before = cluster.smem("first") or {}
    await _observe(runtime, "ADDED", cluster.pod(pod_name) or {})
    assert reads == ["second", "first"]
    assert (cluster.smem("first") or {})["metadata"]["resourceVersion"] == before["metadata"][
        "resourceVersion"
    ]

    # A spec update behind the operator's back: the next write conflicts, reads, carries the new generation.
    await cluster.patch_smem_spec("first", {"sandbox": {"image": "example.com/agent-sandbox:2.0"}})
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    await _observe(runtime, "MODIFIED", cluster.pod(pod_name) or {})
    assert reads == ["second", "first", "first"]
    status = cluster.smem_status("first")
    assert status["phase"] == "Running" and status["observedGeneration"] == 2


def _count(monkeypatch: pytest.MonkeyPatch, kube: KubeApi, method: str) -> list[str]:
    """Count the calls of ``kube.<method>(namespace, name)`` (by name) while still making them."""
    calls: list[str] = []
    real = getattr(kube, method)

    async def counting(namespace: str, name: str) -> object:
        calls.append(name)
        return await real(namespace, name)

    monkeypatch.setattr(kube, method, counting)
    return calls


async def test_a_new_sessionmemory_reads_no_pod_and_a_pod_it_meets_is_still_adopted(
    cluster: Cluster, runtime: sm_state.SessionMemories, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile of a SessionMemory that has no status creates its Pod without reading it first; a Pod
    that exists after all (created by an attempt whose status write was lost) answers the create with 409
    and is read and adopted, never duplicated."""
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body("s1"))
    pod_reads = _count(monkeypatch, runtime.kube, "get_pod")
    await sm_reconcile.reconcile(runtime, cluster.smem("s1") or {})
    assert pod_reads == [] and cluster.pod(pod_name_for("s1")) is not None
    assert cluster.smem_status("s1")["phase"] == "Pending"

    await cluster.create_smem(smem_body("s2", session_id="sesn_two"))
    cluster.kmock.refuse_status_writes = 1  # type: ignore[attr-defined]
    with pytest.raises(KubeApiError):
        await sm_reconcile.reconcile(
            runtime, cluster.smem("s2") or {}
        )  # the Pod is created, its status write lost
    assert not cluster.smem_status("s2")
    pod_uid = (cluster.pod(pod_name_for("s2")) or {})["metadata"]["uid"]
    fresh = sm_state.SessionMemories(
        kube=runtime.kube, config=runtime.config
    )  # a restarted operator: nothing remembered
    await sm_reconcile.reconcile(fresh, cluster.smem("s2") or {})
    assert pod_reads == [pod_name_for("s2")]  # after the create's 409
    assert cluster.smem_status("s2")["podName"] == pod_name_for("s2")
    assert (cluster.pod(pod_name_for("s2")) or {})["metadata"]["uid"] == pod_uid
    assert cluster.pod_ever_created(pod_name_for("s2")) == 1


async def _running(cluster: Cluster, runtime: sm_state.SessionMemories, name: str) -> str:
    """A SessionMemory whose Pod runs, as the watcher saw it; its Pod's name."""
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body(name))
    await sm_reconcile.reconcile(runtime, cluster.smem(name) or {})
    pod_name = pod_name_for(name)
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    await _observe(runtime, "MODIFIED", cluster.pod(pod_name) or {})
    assert cluster.smem_status(name)["phase"] == "Running"
    return pod_name


async def test_the_recheck_of_an_active_session_reads_only_its_pod(
    cluster: Cluster, runtime: sm_state.SessionMemories, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic re-check of a session with a Pod and no outcome reads the Pod (once the watcher's view is
    older than ``pod_reread_interval``: here at once), not the SessionMemory this process wrote last; a Pod
    found gone is still recorded (from the watcher's last view)."""
    runtime.config = dataclasses.replace(runtime.config, pod_reread_interval=0.0)
    pod_name = await _running(cluster, runtime, "s1")
    smem_reads = _count(monkeypatch, runtime.kube, "get_session_memory")
    pod_reads = _count(monkeypatch, runtime.kube, "get_pod")

    await sm_reconcile.recheck(runtime, cluster.smem("s1") or {})
    assert (smem_reads, pod_reads) == ([], [pod_name])
    assert cluster.smem_status("s1")["phase"] == "Running"

    await cluster.request_json(
        "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}", {"gracePeriodSeconds": 0}
    )
    await cluster.remove_pod(pod_name)  # gone, and the watcher missed both events
    assert cluster.pod(pod_name) is None
    await sm_reconcile.recheck(runtime, cluster.smem("s1") or {})
    assert smem_reads == []
    status = cluster.smem_status("s1")
    assert (status["phase"], status["podName"]) == ("Failed", pod_name), status


async def test_the_recheck_of_a_running_fleet_reads_nothing_the_watcher_saw_lately(
    cluster: Cluster, runtime: sm_state.SessionMemories, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within ``pod_reread_interval`` of the watcher's last view of a running session's Pod, its re-check
    makes no API call at all (a fleet of running sessions costs no read per session every 30 s); past it,
    the Pod is read."""
    pod_name = await _running(cluster, runtime, "s1")
    calls: list[str] = []
    real_call = runtime.kube._call

    async def counting(method: str, path: str, **options: object) -> object:
        calls.append(f"{method} {path}")
        return await real_call(method, path, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime.kube, "_call", counting)

    await sm_reconcile.recheck(runtime, cluster.smem("s1") or {})
    assert calls == []
    assert cluster.smem_status("s1")["phase"] == "Running"

    runtime.config = dataclasses.replace(runtime.config, pod_reread_interval=0.0)
    await sm_reconcile.recheck(runtime, cluster.smem("s1") or {})
    assert calls == [f"GET /api/v1/namespaces/{NAMESPACE}/pods/{pod_name}"]  # past the interval: read


async def test_pod_events_that_wait_for_a_slot_are_written_once_from_the_latest_state(
    cluster: Cluster, runtime: sm_state.SessionMemories, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Pod watcher hands its events to ``SessionMemories.pod_updates``: events that arrive while every
    handler slot is busy (a burst of creates) are remembered at once and written as one status, from the
    last one."""
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body("s1"))
    await sm_reconcile.reconcile(runtime, cluster.smem("s1") or {})
    pod_name = pod_name_for("s1")
    writes: list[str] = []
    real_patch = runtime.kube.patch_session_memory_status

    async def counting_patch(namespace: str, name: str, *args: object, **kwargs: object) -> object:
        writes.append(name)
        return await real_patch(namespace, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime.kube, "patch_session_memory_status", counting_patch)
    for _ in range(sm_state.HANDLER_SLOTS):
        await runtime.slots.acquire()  # every slot busy: the derivation waits
    for state in ({"phase": "Pending"}, RUNNING_POD):  # two events, handed over as the watcher does
        await cluster.set_pod_status(pod_name, state)
        key = podwatch.see_pod_event(runtime, "MODIFIED", cluster.pod(pod_name) or {})
        assert key is not None and (key.namespace, key.name) == (NAMESPACE, "s1")
        runtime.pod_updates.ask(key, lambda k: podwatch.derive_later(runtime, k))
    await asyncio.sleep(0.05)
    assert writes == [] and runtime.pod_updates.pending == 1
    for _ in range(sm_state.HANDLER_SLOTS):
        runtime.slots.release()
    for _ in range(200):
        if not runtime.pod_updates.pending:
            break
        await asyncio.sleep(0.01)
    assert cluster.smem_status("s1")["phase"] == "Running"
    assert writes == ["s1"]  # the second ask found nothing new to write
