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
