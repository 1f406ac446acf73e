"""The AgentEnvironment poll loop inside the real operator (kopf, ``--environments``) against the emulated
API and the real store server: a minted session becomes a Secret, a SessionMemory owned by the
AgentEnvironment, and (through the SessionMemory controller) a sandbox Pod with the runner's environment."""

from __future__ import annotations

import base64
import copy
import dataclasses
from typing import Any

import httpx
import kmock as km
from smem_harness import _VERBS, FAST, NAMESPACE, Cluster, eventually, run_operator

from memsync.controller.environment import decisions as d
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd import agentenv as a
from memsync.crd.models import GROUP, sandbox_template

AENV = f"{GROUP}/{a.VERSION}/{a.PLURAL}"


async def test_the_operator_claims_a_session_and_starts_its_pod(cluster: Cluster, store_server: Any) -> None:
    cluster.kmock.resources[AENV] = km.ResourceInfo(
        kind=a.KIND, namespaced=True, verbs=_VERBS, subresources={"status"}, shortnames={"aenv"}
    )
    with httpx.Client(base_url=store_server.url, headers={"x-api-key": store_server.admin_key}) as admin:
        env = admin.post("/v1/environments", json={"name": "operator"}).json()
        key = admin.post(f"/v1/memsync/environments/{env['id']}/keys").json()["key"]
        store = admin.post("/v1/memory_stores", json={"name": "Operator Notes"}).json()
        minted = admin.post(
            "/v1/memsync/sessions",
            json={
                "environment_id": env["id"],
                "resources": [{"type": "memory_store", "memory_store_id": store["id"]}],
            },
        ).json()
    await cluster.create_secret("env-key", {"key": base64.b64encode(key.encode()).decode()})
    body: dict[str, Any] = {
        "apiVersion": a.API_VERSION,
        "kind": a.KIND,
        "metadata": {"name": "team-a", "namespace": NAMESPACE},
        "spec": {
            "environmentId": env["id"],
            "environmentKeySecretRef": {"name": "env-key", "key": "key"},
            "apiBaseUrl": store_server.url,
            "template": sandbox_template({"image": "img:1", "command": ["memsync", "session", "run"]}),
        },
    }
    await cluster.request_json("POST", f"/apis/{GROUP}/{a.VERSION}/namespaces/{NAMESPACE}/{a.PLURAL}", body)
    name = d.object_name(minted["session"]["id"])
    async with run_operator(cluster, dataclasses.replace(FAST, environments=True)):
        smem = await eventually(lambda: cluster.smem(name), what="the SessionMemory", timeout=30)
        pod = await eventually(lambda: cluster.pod(pod_name_for(name)), what="the sandbox Pod", timeout=30)

        def polling() -> dict[str, Any] | None:
            raw = copy.deepcopy(cluster.kmock.objects[km.resource(AENV), NAMESPACE, "team-a"].raw)
            return raw if (raw.get("status") or {}).get("claimed") == 1 else None

        environment = await eventually(polling, what="the AgentEnvironment status")
    assert smem["metadata"]["ownerReferences"][0]["kind"] == "AgentEnvironment"
    assert smem["spec"]["stores"][0]["mountPath"] == "/mnt/memory/operator-notes"
    secret = cluster.kmock.objects[
        km.resource("v1/secrets"), NAMESPACE, d.secret_name(minted["session"]["id"])
    ]
    assert secret["metadata"]["annotations"][a.ANNOTATION_WORK_ID] == minted["work_id"]
    sandbox = next(c for c in pod["spec"]["containers"] if c["name"] == "sandbox")
    env_vars = {e["name"]: e for e in sandbox["env"]}
    assert env_vars["ANTHROPIC_WORK_ID"]["value"] == minted["work_id"]
    assert env_vars["ANTHROPIC_WORK_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == d.secret_name(
        minted["session"]["id"]
    )
    status = environment["status"]
    assert (status["phase"], status["claimed"], status["active"]) == ("Polling", 1, 1)
