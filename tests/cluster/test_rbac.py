"""What each RBAC mode grants, asked of the real API server's authorizer (``kubectl auth can-i`` as the
operator's ServiceAccount).

The namespaced mode's objects are rendered from ``manifests/overlays/namespaced`` and
``manifests/environments/namespaced`` (the same objects the Helm chart renders with
``rbac.scope=namespaced``, tests/helm checks it), moved to a fresh served namespace and bound to a
ServiceAccount of a fresh namespace standing in for memsync-system, so the deployed operator's cluster-wide
grants do not answer for them."""

from __future__ import annotations

import copy
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from .conftest import REPO, SYSTEM_NS, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SERVED = "agents"  # the namespace the namespaced overlay serves


def rendered_rbac(path: str, kinds: set[str] | None = None) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl renders the kustomize tree"
    out = subprocess.run(
        [kubectl, "kustomize", str(REPO / "manifests" / path)], capture_output=True, text=True, check=True
    ).stdout
    wanted = kinds or {"Role", "RoleBinding"}
    return [o for o in yaml.safe_load_all(out) if o and o["kind"] in wanted]


def grant_namespaced(cluster: Cluster, system: str, namespaces: list[str], suffix: str) -> str:
    """What namespaced mode grants (``manifests/overlays/namespaced`` and ``environments/namespaced``: their
    Roles in each of ``namespaces``, their one cluster-wide ClusterRole under a name of its own, so the
    deployed operator's stays) to the ServiceAccount memsync-operator of namespace ``system``; the
    ClusterRole's (and its binding's) name."""
    objs = rendered_rbac("overlays/namespaced") + rendered_rbac("environments/namespaced")
    # The grants of the served namespace, and the leader election's Lease in the operator's own namespace.
    assert {o["metadata"]["namespace"] for o in objs} == {SERVED, SYSTEM_NS}
    for obj in objs:
        for ns in namespaces if obj["metadata"]["namespace"] == SERVED else [system]:
            placed = copy.deepcopy(obj)
            placed["metadata"]["namespace"] = ns
            for subject in placed.get("subjects") or []:
                assert subject["namespace"] == SYSTEM_NS
                subject["namespace"] = system
            cluster.apply(placed)
    (role,) = rendered_rbac("overlays/namespaced", kinds={"ClusterRole"})
    name = role["metadata"]["name"] = f"memsync-operator-cluster-{suffix}"
    cluster.apply(role)
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "memsync-operator", "namespace": system}],
        }
    )
    return name


@pytest.fixture
def namespaced_grants(deployed: Cluster) -> Iterator[tuple[str, str, str]]:
    """(the ServiceAccount's user name, the served namespace, a namespace not served)."""
    suffix = uuid.uuid4().hex[:6]
    system, served, other = f"sys-{suffix}", f"served-{suffix}", f"other-{suffix}"
    for ns in (system, served, other):
        deployed.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    deployed.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "memsync-operator", "namespace": system},
        }
    )
    grant = grant_namespaced(deployed, system, [served], suffix)
    try:
        yield f"system:serviceaccount:{system}:memsync-operator", served, other
    finally:
        deployed.kubectl("delete", "clusterrolebinding,clusterrole", grant, check=False)
        for ns in (system, served, other):
            deployed.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def can(cluster: Cluster, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    proc = cluster.run_kubectl("auth", "can-i", verb, resource, "--as", user, *scope)
    answer = proc.stdout.strip()
    assert answer in {"yes", "no"}, proc.stdout + proc.stderr
    return answer == "yes"


def test_namespaced_mode_grants_only_in_the_served_namespace(
    deployed: Cluster, namespaced_grants: tuple[str, str, str]
) -> None:
    user, served, other = namespaced_grants
    expected = [
        ("get", "secrets"),
        ("create", "secrets"),  # the environments add-on's per-session Secrets
        ("delete", "secrets"),
        ("create", "pods"),
        ("delete", "pods"),
        ("watch", "pods"),
        ("watch", "sessionmemories.agents.memsync.dev"),
        ("create", "sessionmemories.agents.memsync.dev"),
        ("watch", "agentenvironments.agents.memsync.dev"),
        ("create", "events"),
    ]
    for verb, resource in expected:
        assert can(deployed, user, verb, resource, served), f"{verb} {resource} in {served}"
        assert not can(deployed, user, verb, resource, other), f"{verb} {resource} outside {served}"
        assert not can(deployed, user, verb, resource, None), f"{verb} {resource} cluster-wide"
    # Secrets are never listed, watched or changed in place, even where they are served.
    for verb in ("list", "watch", "update", "patch"):
        assert not can(deployed, user, verb, "secrets", served), f"{verb} secrets"
    # The leader election's Lease: in the operator's own namespace only, and by name once created.
    system = user.split(":")[2]
    assert can(deployed, user, "create", "leases.coordination.k8s.io", system)
    assert can(deployed, user, "update", "leases.coordination.k8s.io/memsync-operator", system)
    assert not can(deployed, user, "update", "leases.coordination.k8s.io/kube-scheduler", system)
    assert not can(deployed, user, "create", "leases.coordination.k8s.io", served)
    # Cluster-wide only Node reads and what releases a deleted namespace's SessionMemories (get and patch,
    # their status patched): never a list or a watch, never Pods or Secrets.
    for verb, resource in (
        ("get", "nodes"),
        ("get", "sessionmemories.agents.memsync.dev"),
        ("patch", "sessionmemories.agents.memsync.dev"),
        ("patch", "sessionmemories.agents.memsync.dev/status"),
    ):
        assert can(deployed, user, verb, resource, other), f"{verb} {resource} in {other}"
    for verb, resource in (
        ("list", "sessionmemories.agents.memsync.dev"),
        ("watch", "sessionmemories.agents.memsync.dev"),
        ("list", "nodes"),
        ("get", "pods"),
    ):
        assert not can(deployed, user, verb, resource, other), f"{verb} {resource} in {other}"


def test_cluster_mode_grants_secrets_get_everywhere_and_nothing_more(deployed: Cluster) -> None:
    """The default (manifests/base): get on Secrets in every namespace, never list or watch (create and
    delete come with the environments add-on's cluster-wide RBAC, manifests/environments, when applied)."""
    user = f"system:serviceaccount:{SYSTEM_NS}:memsync-operator"
    assert can(deployed, user, "get", "secrets", "default")
    assert can(deployed, user, "get", "secrets", None)
    for verb in ("list", "watch", "update", "patch"):
        assert not can(deployed, user, verb, "secrets", "default"), f"{verb} secrets"
