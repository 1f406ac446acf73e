"""What only a real API server shows: admission and RBAC refusals of what the operator asks for. Each one
must become the SessionMemory's outcome (``Failed``, ``Ready=False`` with the reason and the API's message,
and a Warning Event), never a silent retry. (A ResourceQuota's or a LimitRange's refusal is a wait instead:
test_waits.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import RunningStoreServer

from .conftest import Cluster
from .scenario import agent, condition, make_store, secret_object, sid, smem, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def warnings_for(cluster: Cluster, namespace: str, name: str) -> list[str]:
    items: list[dict[str, Any]] = cluster.get("-n", namespace, "events")["items"]
    return [
        f"{e['reason']}: {e['message']}"
        for e in items
        if e["involvedObject"]["kind"] == "SessionMemory"
        and e["involvedObject"]["name"] == name
        and e["type"] == "Warning"
    ]


async def one_store_session(
    cluster: Cluster,
    server: RunningStoreServer,
    namespace: str,
    name: str,
    sandbox: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A SessionMemory ``name`` of one new store, with its Secret ``work`` applied; the body, not applied."""
    store = await make_store(server, name, {})
    session = sid()
    cluster.apply(
        secret_object(namespace, "work", await server.mint_secret([(store, "read_write")], session))
    )
    return smem(
        namespace,
        name,
        session=session,
        base_url=server.url,
        stores=[(store, "n", "read_write")],
        sandbox=sandbox or agent("--duration", "5"),
    )


def assert_refused(cluster: Cluster, namespace: str, name: str, reason: str, api_words: str) -> None:
    status = wait_phase(cluster, namespace, name, ("Failed",), timeout=120)
    ready = condition(status, "Ready")
    assert ready["status"] == "False" and ready["reason"] == reason, status
    assert api_words in ready["message"], ready
    cluster.wait(
        f"a Warning Event {reason} on the SessionMemory",
        lambda: [w for w in warnings_for(cluster, namespace, name) if api_words in w],
        60,
    )


async def test_pod_security_refuses_the_sandbox(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """A sandbox asking for an SELinux type that the restricted level forbids, in a restricted namespace:
    refused by the CRD's own validation on this API server, or else by Pod Security admission, whose
    refusal the SessionMemory must report."""
    sandbox = {**agent("--duration", "5"), "securityContext": {"seLinuxOptions": {"type": "spc_t"}}}
    body = await one_store_session(deployed, tier_store, namespace, "psa", sandbox)
    applied = deployed.run_kubectl("apply", "--server-side", "-f", "-", input=json.dumps(body))
    if applied.returncode != 0:
        assert "seLinuxOptions" in applied.stderr, applied.stderr
        return
    assert_refused(deployed, namespace, "psa", "PodRejected", "violates PodSecurity")


async def test_secret_read_forbidden_by_rbac(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """The operator may not read Secrets (its bindings removed): SecretForbidden, not a silent retry.

    Every binding removed is put back as it was, whichever manifest installed it: the AgentEnvironment
    binding (installed by test_environments) grants Secrets too, and an operator left without it loses its
    AgentEnvironment watch minutes later and restarts in the middle of another test."""
    bindings = deployed.get("clusterrolebindings")["items"]
    granting = [
        b
        for b in bindings
        if any(s.get("name") == "memsync-operator" for s in b.get("subjects") or [])
        and "secrets" in deployed.kubectl("get", "clusterrole", b["roleRef"]["name"], "-o", "json")
    ]
    assert granting, "no ClusterRoleBinding gives the operator Secrets"
    try:
        for binding in granting:
            deployed.kubectl("delete", "clusterrolebinding", binding["metadata"]["name"])
        deployed.apply(await one_store_session(deployed, tier_store, namespace, "forbidden"))
        assert_refused(deployed, namespace, "forbidden", "SecretForbidden", "forbidden")
        assert deployed.get("-n", namespace, "pods")["items"] == []
    finally:
        for binding in granting:
            deployed.apply(as_new(binding))
        left = {b["metadata"]["name"] for b in deployed.get("clusterrolebindings")["items"]}
        assert {b["metadata"]["name"] for b in granting} <= left, left


def as_new(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as it can be applied again once deleted: without the fields the API server set."""
    kept = ("name", "namespace", "labels", "annotations")
    metadata = {k: v for k, v in obj["metadata"].items() if k in kept}
    return {**{k: v for k, v in obj.items() if k != "metadata"}, "metadata": metadata}


async def test_a_service_account_that_does_not_exist_is_refused_after_the_wait(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    """ServiceAccount admission refuses the Pod (403) while its serviceAccountName is missing: retried for the
    operator's --service-account-wait (60 s by default), then ServiceAccountNotFound with a Warning Event;
    the refusal is re-checked, so the session starts once the ServiceAccount exists."""
    body = await one_store_session(deployed, tier_store, namespace, "nosa")
    body["spec"]["template"]["spec"]["serviceAccountName"] = "agent-runner"
    deployed.apply(body)
    assert_refused(deployed, namespace, "nosa", "ServiceAccountNotFound", 'serviceaccount "agent-runner"')
    ready = condition(deployed.get("-n", namespace, "smem", "nosa")["status"], "Ready")
    assert "spec.template.spec.serviceAccountName" in ready["message"], ready
    assert deployed.get("-n", namespace, "pods")["items"] == []
    deployed.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "agent-runner", "namespace": namespace},
        }
    )
    deployed.wait(
        "the sandbox Pod once the ServiceAccount exists",
        lambda: deployed.get("-n", namespace, "pods")["items"],
        timeout=120,
        explain=deployed.dump,
    )
    status = wait_phase(
        deployed, namespace, "nosa", ("Pending", "Mounting", "Running", "Flushing", "Succeeded")
    )
    assert status["podName"], status
