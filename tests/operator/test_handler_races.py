"""Interleavings of the Pod watcher and the delete handler, forced one step at a time.

kopf is not running here: the test calls the handlers' own functions in the order that makes the race happen,
against the emulated API server (real HTTP), and plays the kubelet and kopf's finalizer bookkeeping itself.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator

import kopf
import pytest
from smem_harness import (
    FAST,
    FIRST_STORE_RESULT,
    MOUNTED,
    RUNNING_POD,
    Cluster,
    flushed,
    pod_status,
    smem_body,
    terminated,
)

from memsync.controller import handlers as h
from memsync.controller.kube import KubeApi, KubeApiError
from memsync.controller.pod import pod_name_for
from memsync.crd.models import FINALIZER


@pytest.fixture
async def runtime(cluster: Cluster) -> AsyncIterator[h.Runtime]:
    kube = KubeApi.for_host(cluster.url)
    # No settling time: the delete handler decides as soon as it sees the Pod gone.
    yield h.Runtime(kube=kube, config=dataclasses.replace(FAST, report_settle_seconds=0.0))
    kube.close()


async def test_the_final_flush_report_survives_a_failed_watcher_write(
    cluster: Cluster, runtime: h.Runtime
) -> None:
    """The Pod ends with a complete flush report and is removed; the watcher's status write for that last
    event fails (and kopf does not retry event handlers). The delete handler, seeing the Pod gone, must
    record what the Pod reported, not "flush not reported"."""
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    body = smem_body("s1")
    body["metadata"]["finalizers"] = [FINALIZER]  # what kopf adds before any handler runs
    await cluster.create_smem(body)
    pod_name = pod_name_for("s1")

    await h.reconcile(runtime, cluster.smem("s1") or {})
    assert cluster.pod(pod_name) is not None
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    await h.observe_pod(runtime, "MODIFIED", cluster.pod(pod_name) or {})
    assert cluster.smem_status("s1")["phase"] == "Running"

    await cluster.delete_smem("s1")
    with pytest.raises(kopf.TemporaryError, match="waiting for sandbox Pod"):
        await h.finalize(runtime, cluster.smem("s1") or {}, 0.0)
    terminating = cluster.pod(pod_name) or {}
    assert terminating["metadata"].get("deletionTimestamp")
    await h.observe_pod(runtime, "MODIFIED", terminating)
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
        await h.observe_pod(runtime, "DELETED", last)
    assert cluster.smem_status("s1")["phase"] == "Flushing"  # the write was really lost

    await h.finalize(runtime, cluster.smem("s1") or {}, 1.0)  # returns: the object may be released
    status = cluster.smem_status("s1")
    assert status["phase"] == "Succeeded", status
    flush_cond = next(c for c in status["conditions"] if c["type"] == "Flushed")
    assert (flush_cond["status"], flush_cond["reason"]) == ("True", "FlushComplete")
    assert status["stores"][0] == FIRST_STORE_RESULT


@pytest.mark.parametrize("secret_exists", [True, False])
async def test_a_reconcile_validates_the_spec_once(
    cluster: Cluster, runtime: h.Runtime, monkeypatch: pytest.MonkeyPatch, secret_exists: bool
) -> None:
    """One reconcile (creating the Pod, or refusing for a missing Secret) validates the spec exactly once and
    hands the store paths on to its status write."""
    if secret_exists:
        await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    await cluster.create_smem(smem_body("s1"))
    calls: list[object] = []
    real = h.validate_spec

    def counting(raw: object) -> object:
        calls.append(raw)
        return real(raw)  # type: ignore[arg-type]

    monkeypatch.setattr(h, "validate_spec", counting)
    await h.reconcile(runtime, cluster.smem("s1") or {})
    assert len(calls) == 1
    status = cluster.smem_status("s1")
    assert [s["memoryStoreId"] for s in status["stores"]] == [
        s["memoryStoreId"] for s in smem_body("s1")["spec"]["stores"]
    ]
    assert all(s.get("mountPath", "").startswith("/mnt/memory/") for s in status["stores"]), status
    assert (cluster.pod(pod_name_for("s1")) is not None) == secret_exists


async def test_the_duplicate_check_reads_the_index_and_writes_start_from_the_known_object(
    cluster: Cluster, runtime: h.Runtime, monkeypatch: pytest.MonkeyPatch
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
        for key, claim in (h.session_claim(obj) or {}).items():
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

    await h.reconcile(runtime, second, claims)
    ready = h.st.condition(cluster.smem_status("second"), h.st.READY) or {}
    assert ready["reason"] == "DuplicateSession" and "first" in ready["message"]
    await h.reconcile(runtime, first, claims)
    pod_name = pod_name_for("first")
    assert cluster.pod(pod_name) is not None and cluster.pod(pod_name_for("second")) is None
    assert reads == ["second", "first"]  # one read per reconcile; its status writes read nothing more

    # The Pod watcher's event of the Pod just created: nothing changed, nothing read or written.
    before = cluster.smem("first") or {}
    await h.observe_pod(runtime, "ADDED", cluster.pod(pod_name) or {})
    assert reads == ["second", "first"]
    assert (cluster.smem("first") or {})["metadata"]["resourceVersion"] == before["metadata"][
        "resourceVersion"
    ]

    # A spec update behind the operator's back: the next write conflicts, reads, carries the new generation.
    await cluster.patch_smem_spec("first", {"sandbox": {"image": "example.com/agent-sandbox:2.0"}})
    await cluster.set_pod_status(pod_name, RUNNING_POD)
    await h.observe_pod(runtime, "MODIFIED", cluster.pod(pod_name) or {})
    assert reads == ["second", "first", "first"]
    status = cluster.smem_status("first")
    assert status["phase"] == "Running" and status["observedGeneration"] == 2
