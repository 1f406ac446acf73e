"""The sandbox Pod template on a real API server: the CRD is accepted (CEL cost budget included), ``kubectl
explain`` documents every template field, a typo or a wrong type is refused at apply (kubectl's default
Strict field validation; nothing in the template preserves unknown fields), each isolation guard is
refused with its field path, and a template's fields reach the sandbox Pod of a session that runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import RunningStoreServer
from memsync.controller.sessionmemory.pod import pod_name_for

from .conftest import SMEM, Cluster
from .scenario import agent, make_store, sid, smem, start_session, store_files, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def body(namespace: str, name: str, **kw: Any) -> dict[str, Any]:
    return smem(
        namespace,
        name,
        session=sid(),
        base_url="http://127.0.0.1:1",
        stores=[("memstore_01aa", "notes", "read_write")],
        **kw,
    )


def refused(cluster: Cluster, obj: dict[str, Any]) -> str:
    """kubectl's plain ``apply`` (client-side, Strict field validation): the refusal it prints."""
    proc = cluster.run_kubectl("apply", "-f", "-", input=json.dumps(obj))
    assert proc.returncode != 0, f"accepted: {json.dumps(obj)[:400]}"
    return proc.stderr


def explain(cluster: Cluster, field: str) -> str:
    """``kubectl explain``, waiting for the API server to publish a new CRD's OpenAPI (what explain reads),
    which it does a moment after the CRD is Established."""

    def answer() -> str:
        proc = cluster.run_kubectl("explain", field)
        return proc.stdout if proc.returncode == 0 else ""

    text: str = cluster.wait(f"kubectl explain {field}", answer, 60)
    return text


def test_kubectl_explain_documents_the_template(deployed: Cluster) -> None:
    text = explain(deployed, "sessionmemory.spec.template.spec.runtimeClassName")
    assert "RuntimeClassName refers to a RuntimeClass object" in text
    text = explain(deployed, "sessionmemory.spec.template.spec.containers.readinessProbe.httpGet")
    # nested types are inlined whole, with their descriptions
    assert "Name or number of the port to access on the container" in text
    served = deployed.get("crd", SMEM)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "x-kubernetes-preserve-unknown-fields" not in json.dumps(served["properties"]["spec"])


def test_a_typo_or_a_wrong_type_in_the_template_is_refused(deployed: Cluster, namespace: str) -> None:
    typo = body(namespace, "typo", sandbox={**agent(), "comand": ["run"]})
    assert 'unknown field "spec.template.spec.containers[0].comand"' in refused(deployed, typo)
    wrong = body(namespace, "wrong", sandbox={**agent(), "env": "NOT_A_LIST"})
    assert "spec.template.spec.containers[0].env" in refused(deployed, wrong)
    pod_typo = body(namespace, "podtypo", sandbox=agent(), pod_spec={"runtimeClass": "gvisor"})
    assert 'unknown field "spec.template.spec.runtimeClass"' in refused(deployed, pod_typo)
    assert deployed.get("-n", namespace, "smem")["items"] == []


#: (extra sandbox container fields, extra Pod spec fields, the refused field path, words of the message)
GUARDS: list[tuple[dict[str, Any], dict[str, Any], str, str]] = [
    ({}, {"hostNetwork": True}, "spec.template.spec.hostNetwork", "must not be true"),
    ({}, {"hostPID": True}, "spec.template.spec.hostPID", "must not be true"),
    ({}, {"hostIPC": True}, "spec.template.spec.hostIPC", "must not be true"),
    (
        {},
        {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
        "spec.template.spec.volumes[0].hostPath",
        "hostPath volumes are not allowed",
    ),
    (
        {"volumeMounts": [{"name": "w", "mountPath": "/mnt"}]},
        {"volumes": [{"name": "w", "emptyDir": {}}]},
        "spec.template.spec.containers[0].volumeMounts[0].mountPath",
        "must not be at, above or below /mnt/memory",
    ),
    (
        {"securityContext": {"privileged": True}},
        {},
        "spec.template.spec.containers[0].securityContext.privileged",
        "must not be true",
    ),
    (
        {"ports": [{"containerPort": 80, "hostPort": 80}]},
        {},
        "spec.template.spec.containers[0].ports",
        "hostPort must not be set",
    ),
    (
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
        {},
        "spec.template.spec.containers[0].securityContext.seLinuxOptions.type",
        "container_t",
    ),
    (
        {"livenessProbe": {"httpGet": {"host": "169.254.169.254", "port": 80, "path": "/"}}},
        {},
        "spec.template.spec.containers[0]",
        "livenessProbe.httpGet.host must not be set",
    ),
    (
        {"lifecycle": {"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}}},
        {},
        "spec.template.spec.containers[0]",
        "lifecycle.preStop.tcpSocket.host must not be set",
    ),
]


@pytest.mark.parametrize("case", GUARDS, ids=[g[2].rsplit(".", 1)[-1] for g in GUARDS])
def test_the_isolation_guards_are_refused_at_apply(
    deployed: Cluster, namespace: str, case: tuple[dict[str, Any], dict[str, Any], str, str]
) -> None:
    sandbox, pod_spec, path, words = case
    obj = body(namespace, "guard", sandbox={**agent(), **sandbox}, pod_spec=pod_spec)
    stderr = refused(deployed, obj)
    assert path in stderr and words in stderr, stderr


@pytest.mark.parametrize(
    "key",
    [
        "container.apparmor.security.beta.kubernetes.io/memsync-sync",
        "seccomp.security.alpha.kubernetes.io/pod",
    ],
)
def test_profile_annotations_are_refused_at_apply(deployed: Cluster, namespace: str, key: str) -> None:
    obj = body(namespace, "annotated", sandbox=agent(), metadata={"annotations": {key: "unconfined"}})
    stderr = refused(deployed, obj)
    assert "spec.template.metadata.annotations" in stderr and "AppArmor or seccomp" in stderr, stderr


async def test_the_templates_fields_reach_a_running_session(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "templated", {"/a.md": "a\n"})
    resources = {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "400Mi"}}
    await start_session(
        deployed,
        tier_store,
        namespace,
        "templated",
        stores=[(store, "notes", "read_write")],
        sandbox={**agent("--duration", "3"), "volumeMounts": [{"name": "work", "mountPath": "/workspace"}]},
        pod_spec={
            "volumes": [{"name": "work", "emptyDir": {}}],
            "activeDeadlineSeconds": 3600,
            "memsync": {"resources": resources, "env": [{"name": "NO_PROXY", "value": ".svc"}]},
        },
        metadata={"labels": {"team": "research"}, "annotations": {"example.com/ticket": "T-1"}},
    )
    pod = deployed.wait(
        "the sandbox Pod", lambda: deployed.get_or_none("-n", namespace, "pod", pod_name_for("templated"))
    )
    assert pod["metadata"]["labels"]["team"] == "research"
    assert pod["metadata"]["annotations"]["example.com/ticket"] == "T-1"
    spec = pod["spec"]
    assert spec["activeDeadlineSeconds"] == 3600
    assert {"name": "work", "emptyDir": {}} in spec["volumes"]
    (sandbox,) = spec["containers"]
    assert [m["mountPath"] for m in sandbox["volumeMounts"]][:2] == ["/mnt/memory", "/workspace"]
    mount, sync = spec["initContainers"]
    # both also request the stores' folder's size (the operator's default 1Gi) as ephemeral storage, with the
    # operator's default limit (2Gi)
    requests = {**resources["requests"], "ephemeral-storage": "1Gi"}
    limits = {**resources.get("limits", {}), "ephemeral-storage": "2Gi"}
    assert mount["resources"] == sync["resources"] == {"requests": requests, "limits": limits}
    assert {"name": "memory", "emptyDir": {"sizeLimit": "1Gi"}} in spec["volumes"]
    for memsync in (mount, sync):
        assert {"name": "NO_PROXY", "value": ".svc"} in memsync["env"]
    status = wait_phase(deployed, namespace, "templated", ("Succeeded", "Failed"))
    assert status["phase"] == "Succeeded", status
    assert "/a.md" in await store_files(tier_store, store)
