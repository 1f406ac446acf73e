"""kopf's connection pool holds every watch the operator keeps open and still has room for its requests:
with ``--environments`` on 40 namespaces the operator watches SessionMemories, Pods and AgentEnvironments in
each (120 watches), and a SessionMemory in the last namespace still gets its finalizer, its Pod and its
status. A pool sized for two watches a namespace (112 connections) left the watches of the last namespaces
and every other request of kopf's waiting for a connection for good."""

from __future__ import annotations

import base64
import dataclasses

import kmock as km
from smem_harness import _VERBS, FAST, Cluster, eventually, run_operator, smem_body

from memsync.crd import agentenv as a
from memsync.crd.models import FINALIZER, GROUP

NAMESPACES = tuple(f"team-{i:02d}" for i in range(40))


async def test_forty_namespaces_with_environments(cluster: Cluster) -> None:
    last = NAMESPACES[-1]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "work-secret", "namespace": last},
        "data": {"secret": base64.b64encode(b"opaque").decode()},
    }
    await cluster.request_json("POST", f"/api/v1/namespaces/{last}/secrets", secret)
    cluster.kmock.resources[f"{GROUP}/{a.VERSION}/{a.PLURAL}"] = km.ResourceInfo(
        kind=a.KIND, namespaced=True, verbs=_VERBS, subresources={"status"}, shortnames={"aenv"}
    )
    config = dataclasses.replace(FAST, environments=True)
    async with run_operator(cluster, config, namespaces=NAMESPACES):

        def watching() -> set[str]:
            return {str(r.url.path) for r in list(cluster.kmock) if r.params.get("watch") == "true"}

        # Every namespace's three watches are open (the emulator shows a watch only what happens after it
        # began): 120 connections held for good.
        await eventually(lambda: len(watching()) == 3 * len(NAMESPACES), timeout=60, what="120 watches")
        body = smem_body("s1")
        body["metadata"]["namespace"] = last
        path = f"/apis/{body['apiVersion']}/namespaces/{last}/sessionmemories"
        await cluster.request_json("POST", path, body)

        async def started() -> dict[str, object] | None:
            obj = await cluster.request_json("GET", f"{path}/s1")
            return obj if (obj.get("status") or {}).get("phase") else None

        obj = await eventually(started, timeout=60, what="a status in the 40th namespace")
        assert obj is not None and FINALIZER in obj["metadata"]["finalizers"]
        pods = await cluster.request_json("GET", f"/api/v1/namespaces/{last}/pods")
        assert [p["metadata"]["name"] for p in pods["items"]] == ["s1-sandbox"]
