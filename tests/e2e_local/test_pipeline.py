"""One pipeline: the real parts chained, nothing stubbed between them.

The operator (kopf, wired exactly as the operator tier wires it, against the emulated Kubernetes API of
``tests/operator/smem_harness.py``) creates the Pod for a SessionMemory; the local Pod runner executes
exactly that Pod, read back from the emulated API, against the real store server; a small kubelet loop
writes the runner's Pod status into the emulated API and, when the operator deletes the Pod, runs the
termination and then removes the Pod object; the operator brings the SessionMemory to its final phase.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
import smem_harness as op

from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.models import FINALIZER, sandbox_template

from .harness import SANDBOX_CONTAINER, SECRET_KEY, agent_command, as_store_paths, session_id, store_files
from .podrunner import PodRunner

if TYPE_CHECKING:
    import kmock as km

    from conftest import RunningStoreServer

pytestmark = pytest.mark.timeout(180)
REPORT_PATH = "/tmp/agent-report.json"


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    kmock_options["cls"] = op.MemsyncEmulator
    return kmock_options


@pytest.fixture
async def cluster(kmock: km.KubernetesEmulator) -> op.Cluster:
    op.declare_resources(kmock)
    return op.Cluster(kmock)


class Kubelet:
    """Plays the kubelet for one Pod of the emulated API: runs it locally and reports its status."""

    def __init__(self, cluster: op.Cluster, pod_name: str, workdir: Path) -> None:
        self.cluster = cluster
        self.pod_name = pod_name
        self.workdir = workdir
        self.runner: PodRunner | None = None
        self.smem_phases: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._deleting: asyncio.Task[Any] | None = None

    def secret(self, name: str) -> dict[str, Any]:
        key = ("v1/secrets", self.cluster.namespace, name)
        raw: dict[str, Any] = self.cluster.kmock.objects[key].raw
        return dict(raw)

    async def _loop(self, secret_names: list[str]) -> None:
        pod = self.cluster.pod(self.pod_name)
        assert pod is not None
        secrets = [self.secret(n) for n in secret_names]
        self.runner = runner = PodRunner(
            pod, workdir=self.workdir, secrets=secrets, harness_env={"MEMSYNC_TEST_DELETE_WINDOW": "1"}
        )
        await runner.start()
        last: Any = None
        terminating = False
        while True:
            current = self.cluster.pod(self.pod_name)
            if current is None:
                return
            if not terminating and current["metadata"].get("deletionTimestamp"):
                terminating = True
                grace = current["metadata"].get("deletionGracePeriodSeconds")
                self._deleting = asyncio.get_running_loop().create_task(runner.delete(grace))
            status = runner.status()
            if status != last:
                await self.cluster.set_pod_status(self.pod_name, status)
                last = status
            if terminating and runner.finished:
                await self.cluster.remove_pod(self.pod_name)
                return
            await asyncio.sleep(0.1)

    def start(self, secret_names: list[str]) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(secret_names))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.runner is not None:
            await self.runner.aclose()


@contextlib.asynccontextmanager
async def kubelet(cluster: op.Cluster, pod_name: str, workdir: Path, secret: str) -> AsyncIterator[Kubelet]:
    k = Kubelet(cluster, pod_name, workdir)
    await op.eventually(
        lambda: _value(cluster.pod(pod_name)), timeout=30, what=f"the operator's Pod {pod_name}"
    )
    k.start([secret])
    try:
        yield k
    finally:
        await k.stop()


async def _value(value: Any) -> Any:
    return value


def smem(
    name: str, sid: str, secret: str, base_url: str, stores: list[dict[str, str]], *agent: str
) -> dict[str, Any]:
    return {
        "apiVersion": op.API_VERSION,
        "kind": op.KIND,
        "metadata": {"name": name, "namespace": op.NAMESPACE},
        "spec": {
            "sessionId": sid,
            "workItemSecretRef": {"name": secret, "key": SECRET_KEY},
            "apiBaseUrl": base_url,
            "stores": stores,
            "sync": {"intervalSeconds": 5, "deletions": "enabled", "finalFlushSeconds": 10},
            "template": sandbox_template(agent_command(*agent)),
        },
    }


async def store_and_work_secret(
    cluster: op.Cluster, server: RunningStoreServer, prefix: str, memories: dict[str, str] | None = None
) -> tuple[str, str]:
    """A new read-write store holding ``memories``, a session id, and the Secret ``work`` (key
    ``SECRET_KEY``) with that session's minted work-item secret: (store id, session id)."""
    async with server.admin_client() as admin:
        store = (await admin.create_store(f"{prefix}-{session_id()[-6:]}")).id
        for path, content in (memories or {}).items():
            await admin.create_memory(store, path, content)
    sid = session_id()
    work = await server.mint_secret([(store, "read_write")], session_id=sid)
    await cluster.create_secret("work", {SECRET_KEY: base64.b64encode(work.encode()).decode()})
    return store, sid


async def test_operator_runner_and_store_end_to_end(
    tmp_path: Path, cluster: op.Cluster, store_server: RunningStoreServer
) -> None:
    store, sid = await store_and_work_secret(cluster, store_server, "pipeline", {"/hello.md": "hello\n"})
    body = smem(
        "pipeline",
        sid,
        "work",
        store_server.url,
        [{"memoryStoreId": store, "name": "notes", "access": "read_write"}],
        "--duration",
        "6",
        "--interval",
        "0.2",
        "--seed",
        "3",
    )
    async with op.run_operator(cluster):
        await cluster.create_smem(body)
        async with kubelet(cluster, pod_name_for("pipeline"), tmp_path / "pod", "work") as k:
            final = await op.eventually(
                lambda: _value(cluster.smem_status("pipeline").get("phase") in ("Succeeded", "Failed")),
                timeout=120,
                what="a final phase",
            )
            assert final
            status = cluster.smem_status("pipeline")
            assert k.runner is not None
            assert status["phase"] == "Succeeded", (status, k.runner.logs("memsync-sync"))
            report = json.loads(k.runner.host_path(SANDBOX_CONTAINER, REPORT_PATH).read_text())
            async with store_server.admin_client() as admin:
                remote = await store_files(admin, store)
            assert remote == as_store_paths(report["stores"]["/mnt/memory/notes"]["files"])
            (entry,) = status["stores"]
            assert entry["memoryStoreId"] == store and entry["memoriesMounted"] == 1
            assert entry["unsent"] == 0
            assert status["podName"] == pod_name_for("pipeline")
            # the Pod the runner executed is exactly the one the operator created
            assert k.runner.pod["spec"] == (cluster.pod(pod_name_for("pipeline")) or {}).get("spec")

            # the outcome is recorded, so the finalizer is gone: deleting the SessionMemory releases it at
            # once (its ended Pod goes with Kubernetes' garbage collector, through its owner reference)
            await op.eventually(
                lambda: _value(
                    FINALIZER not in (cluster.smem("pipeline") or {})["metadata"].get("finalizers", [])
                ),
                timeout=30,
                what="the finalizer removed",
            )
            await cluster.delete_smem("pipeline")
            await op.eventually(
                lambda: _value(cluster.smem("pipeline") is None), timeout=30, what="SessionMemory gone"
            )
            owners = (cluster.pod(pod_name_for("pipeline")) or {})["metadata"]["ownerReferences"]
            assert [o["kind"] for o in owners] == ["SessionMemory"]


async def test_deleting_a_running_session_flushes_through_the_operator(
    tmp_path: Path, cluster: op.Cluster, store_server: RunningStoreServer
) -> None:
    store, sid = await store_and_work_secret(cluster, store_server, "pipeline-del")
    body = smem(
        "doomed",
        sid,
        "work",
        store_server.url,
        [{"memoryStoreId": store, "name": "journal", "access": "read_write"}],
        "--scenario",
        "steady",
        "--duration",
        "120",
        "--interval",
        "0.2",
        "--term-linger",
        "1",
    )
    async with op.run_operator(cluster):
        await cluster.create_smem(body)
        pod_name = pod_name_for("doomed")
        async with kubelet(cluster, pod_name, tmp_path / "pod", "work") as k:
            await op.eventually(
                lambda: _value(cluster.smem_status("doomed").get("phase") == "Running"),
                timeout=60,
                what="Running",
            )
            await cluster.delete_smem("doomed")
            await op.eventually(lambda: _value(cluster.smem("doomed") is None), timeout=120, what="smem gone")
            assert k.runner is not None
            report = json.loads(k.runner.host_path(SANDBOX_CONTAINER, REPORT_PATH).read_text())
            assert report["interrupted"] is True
            async with store_server.admin_client() as admin:
                remote = await store_files(admin, store)
            assert remote == as_store_paths(report["stores"]["/mnt/memory/journal"]["files"])
            assert len(remote) >= 3


async def test_missing_secret_is_refused_before_any_pod(
    cluster: op.Cluster, store_server: RunningStoreServer
) -> None:
    async with store_server.admin_client() as admin:
        store = (await admin.create_store(f"pipeline-nosecret-{session_id()[-6:]}")).id
    body = smem(
        "nosecret",
        session_id(),
        "absent",
        store_server.url,
        [{"memoryStoreId": store, "name": "notes", "access": "read_write"}],
        "--duration",
        "1",
    )
    async with op.run_operator(cluster):
        await cluster.create_smem(body)
        await op.eventually(
            lambda: _value(cluster.smem_status("nosecret").get("phase") == "Failed"),
            timeout=30,
            what="Failed",
        )
        status = cluster.smem_status("nosecret")
        assert "Secret absent (spec.workItemSecretRef.name) does not exist" in status["message"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "SecretNotFound"
        assert cluster.pod(pod_name_for("nosecret")) is None  # the agent never starts


class _RunnerPorts:
    """The operator reads a Pod's ``/status`` at its IP and the sidecar's metrics port; the local runner
    maps that port to a free one per Pod, so the test hands the operator the runner's mapping."""

    def __init__(self) -> None:
        self.kubelet: Kubelet | None = None

    def __call__(self, pod: Any) -> str | None:
        runner = self.kubelet.runner if self.kubelet is not None else None
        if runner is None or not (pod.get("status") or {}).get("podIP"):
            return None
        return f"http://127.0.0.1:{runner.port_map[9477]}/status"


def _synced(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Synced"), {})


async def test_synced_is_false_while_the_store_is_down_and_true_again_after(
    tmp_path: Path, cluster: op.Cluster, fresh_store_server: RunningStoreServer
) -> None:
    server = fresh_store_server
    store, sid = await store_and_work_secret(cluster, server, "health", {"/hello.md": "hello\n"})
    body = smem(
        "health",
        sid,
        "work",
        server.url,
        [{"memoryStoreId": store, "name": "notes", "access": "read_write"}],
        "--scenario",
        "steady",
        "--duration",
        "120",
        "--interval",
        "0.5",
        "--term-linger",
        "1",
    )
    ports = _RunnerPorts()
    config = dataclasses.replace(op.FAST, health_interval=1.0, health_address=ports)
    async with op.run_operator(cluster, config):
        await cluster.create_smem(body)
        async with kubelet(cluster, pod_name_for("health"), tmp_path / "pod", "work") as k:
            ports.kubelet = k

            def synced_is(value: str) -> Any:
                return lambda: _value(_synced(cluster.smem_status("health")).get("status") == value)

            await op.eventually(synced_is("True"), timeout=60, what="Synced=True")
            mounted_at = cluster.smem_status("health")["lastSyncTime"]
            await op.eventually(
                lambda: _value(cluster.smem_status("health")["lastSyncTime"] > mounted_at),
                timeout=30,
                what="lastSyncTime after the mount",
            )
            server.stop()
            # Three sync intervals (5 s each) plus the poll: the condition must have turned by then.
            await op.eventually(synced_is("False"), timeout=16, what="Synced=False while the store is down")
            down = cluster.smem_status("health")
            assert _synced(down)["reason"] == "SyncFailing"
            assert "memory sync failed" in _synced(down)["message"]
            assert down["phase"] == "Running"
            uploaded = down["stores"][0]["uploaded"]
            assert uploaded >= 1  # the running totals of the session so far
            server.start()
            await op.eventually(synced_is("True"), timeout=30, what="Synced=True after recovery")
            await cluster.delete_smem("health")
            await op.eventually(lambda: _value(cluster.smem("health") is None), timeout=120, what="smem gone")
