"""The emulator's API-server behaviours the operator tests rely on (so they fail where a cluster would)."""

from __future__ import annotations

import json

import pytest
from smem_harness import KUBELET_FINALIZER, NAMESPACE, Cluster, smem_body

from memsync.crd.models import API_VERSION

MERGE = "application/merge-patch+json"


async def _status_code(
    cluster: Cluster, method: str, path: str, body: object, content_type: str = MERGE
) -> int:
    async with cluster.kmock.request(
        method, path, json=body, headers={"Content-Type": content_type}
    ) as response:
        await response.read()
        return response.status


async def test_objects_get_identity_and_versions(cluster: Cluster) -> None:
    created = await cluster.create_smem(smem_body("a"))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    rv = int(meta["resourceVersion"])
    path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/sessionmemories/a"
    await cluster.request_json("PATCH", path, {"metadata": {"labels": {"x": "y"}}}, content_type=MERGE)
    after = cluster.smem("a") or {}
    assert int(after["metadata"]["resourceVersion"]) > rv
    assert after["metadata"]["generation"] == 1  # no spec change
    await cluster.patch_smem_spec("a", {"sync": {"intervalSeconds": 20}})
    assert (cluster.smem("a") or {})["metadata"]["generation"] == 2


async def test_resource_version_preconditions(cluster: Cluster) -> None:
    created = await cluster.create_smem(smem_body("a"))
    path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/sessionmemories/a"
    stale = created["metadata"]["resourceVersion"]
    await cluster.request_json("PATCH", path, {"metadata": {"labels": {"x": "1"}}}, content_type=MERGE)
    assert (
        await _status_code(
            cluster,
            "PATCH",
            path + "/status",
            {"metadata": {"resourceVersion": stale}, "status": {"phase": "Pending"}},
        )
        == 409
    )
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
        {"op": "add", "path": "/metadata/labels/y", "value": "2"},
    ]
    assert await _status_code(cluster, "PATCH", path, ops, "application/json-patch+json") == 422
    assert "y" not in (cluster.smem("a") or {})["metadata"]["labels"]


async def test_the_status_subresource_and_pruning(cluster: Cluster) -> None:
    await cluster.create_smem(smem_body("a"))
    path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/sessionmemories/a"
    await cluster.request_json("PATCH", path, {"status": {"phase": "Running"}}, content_type=MERGE)
    assert "status" not in (cluster.smem("a") or {})
    await cluster.request_json(
        "PATCH",
        path + "/status",
        {"spec": {"sessionId": "sesn_hijack"}, "status": {"phase": "Pending", "bogus": 1}},
        content_type=MERGE,
    )
    obj = cluster.smem("a") or {}
    assert obj["status"] == {"phase": "Pending"}
    assert obj["spec"]["sessionId"] == "sesn_011abc"


async def test_pods_terminate_gracefully_until_the_kubelet_lets_go(cluster: Cluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NAMESPACE},
        "spec": {"terminationGracePeriodSeconds": 42},
    }
    created = await cluster.request_json("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    assert KUBELET_FINALIZER in created["metadata"]["finalizers"]
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/p"
    assert await _status_code(cluster, "DELETE", path, {"preconditions": {"uid": "someone-else"}}) == 409
    await cluster.request_json("DELETE", path)
    terminating = cluster.pod("p") or {}
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 42
    await cluster.remove_pod("p")
    assert cluster.pod("p") is None


async def test_a_watch_from_a_list_version_does_not_replay_the_list(cluster: Cluster) -> None:
    await cluster.create_smem(smem_body("old"))
    listing = await cluster.request_json("GET", f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/sessionmemories")
    version = listing["metadata"]["resourceVersion"]
    assert [i["metadata"]["name"] for i in listing["items"]] == ["old"]
    base = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/sessionmemories"
    url = f"{base}?watch=true&resourceVersion={version}"
    async with cluster.kmock.get(url) as response:
        await cluster.create_smem(smem_body("new"))
        line = await response.content.readline()
        while not line.strip():
            line = await response.content.readline()
        event = json.loads(line)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "new")


@pytest.mark.parametrize("bad_rv", ["1", "999999999"])
async def test_stale_or_future_versions_conflict(cluster: Cluster, bad_rv: str) -> None:
    await cluster.create_smem(smem_body("a"))
    path = f"/apis/{API_VERSION}/namespaces/{NAMESPACE}/sessionmemories/a/status"
    assert (
        await _status_code(cluster, "PATCH", path, {"metadata": {"resourceVersion": bad_rv}, "status": {}})
        == 409
    )
