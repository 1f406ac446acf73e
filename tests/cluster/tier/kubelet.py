"""The process kubelet: registers its Node (capacity, conditions, addresses), renews the node Lease every
10 s, watches the Pods bound to it and runs each with a ``PodWorker``. It authenticates as
``system:node:<name>``, so the Node authorizer and NodeRestriction limit it as they limit a kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import uuid
from datetime import UTC, datetime
from typing import Any

from .kubeapi import ApiError, KubeApi
from .pod import NodeContext, PodWorker

LEASE_SECONDS = 40
RENEW_SECONDS = 10.0
STATUS_SECONDS = 60.0
log = logging.getLogger("process-kubelet")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ProcessKubelet:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.api: KubeApi = ctx.api
        self.name = ctx.node_name
        self.workers: dict[str, PodWorker] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._node_uid = ""

    # ------------------------------------------------------------------ node

    def node_status(self) -> dict[str, Any]:
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        now = _now()

        def cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        return {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                cond(
                    "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"
                ),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                cond("Ready", "True", "KubeletReady", "process kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.ctx.network.gateway},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.name).hex,
                "systemUUID": uuid.uuid5(uuid.NAMESPACE_URL, self.name).hex,
                "bootID": uuid.uuid4().hex,
                "kernelVersion": platform.release(),
                "osImage": "process kubelet (memsync test tier)",
                "containerRuntimeVersion": "process://1",
                "kubeletVersion": "v0.0.0-process",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    async def register(self) -> None:
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch,
        }
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": labels}}
        try:
            node = await self.api.create("/api/v1/nodes", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            node = await self.api.get(f"/api/v1/nodes/{self.name}")
        self._node_uid = node["metadata"]["uid"]
        await self.post_status()

    async def post_status(self) -> None:
        await self.api.patch(f"/api/v1/nodes/{self.name}/status", {"status": self.node_status()})

    async def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_now()}
        owner = [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}]
        try:
            await self.api.patch(
                path, {"metadata": {"ownerReferences": owner}, "spec": spec}, strategic=False
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.api.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "ownerReferences": owner},
                    "spec": spec,
                },
            )

    async def _every(self, seconds: float, action: Any) -> None:
        while True:
            try:
                await action()
            except (ApiError, OSError) as exc:
                log.warning("%s failed: %s", action.__name__, exc)
            await asyncio.sleep(seconds)

    # ------------------------------------------------------------------ pods

    async def post_event(self, pod: dict[str, Any], reason: str, message: str, kind: str) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": self.name},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            await self.api.create(f"/api/v1/namespaces/{meta['namespace']}/events", body)

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                del self.workers[uid]
                await worker.vanish()
            return
        if worker is None:
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                return  # finished before this kubelet started
            worker = PodWorker(self.ctx, pod)
            self.workers[uid] = worker
            worker.start()
        worker.update(pod)

    async def watch_pods(self) -> None:
        path = "/api/v1/pods"
        selector = f"spec.nodeName={self.name}"
        while True:
            seen: set[str] = set()
            try:
                async for event in self.api.watch(path, fieldSelector=selector):
                    uid = event["object"]["metadata"]["uid"]
                    seen.add(uid)
                    await self._on_pod(event["type"], event["object"])
            except (ApiError, OSError, ValueError) as exc:
                log.warning("pod watch ended: %s", exc)
                await asyncio.sleep(1)
            for uid in [u for u in self.workers if u not in seen]:
                await self._on_pod("DELETED", self.workers[uid].pod)

    async def run(self) -> None:
        await self.register()
        await self.renew_lease()
        self._tasks = [
            asyncio.create_task(self._every(RENEW_SECONDS, self.renew_lease)),
            asyncio.create_task(self._every(STATUS_SECONDS, self.post_status)),
            asyncio.create_task(self.watch_pods()),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for worker in list(self.workers.values()):
            await worker.vanish()
        self.workers.clear()
        os.sync()
