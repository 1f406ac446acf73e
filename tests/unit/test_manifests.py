"""The kustomize manifests: every overlay renders with ``kubectl kustomize``, and every object validates
offline against the Kubernetes schemas of the version kind-config.yaml pins (SessionMemory objects against
our CRD).

kubectl is required: these tests fail, not skip, without it.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_crd_apiserver import admit

from memsync.crd import agentenv_schema
from memsync.crd.models import API_VERSION, KIND, validate_spec
from memsync.crd.schema import build_crd
from support.pod_security import restricted_violations

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = ("kind", "production", "store-postgres", "namespaced")
KUSTOMIZATIONS = (
    "base",
    "overlays/kind",
    "overlays/production",
    "overlays/store-postgres",
    "overlays/namespaced",
)
#: The namespace the namespaced overlay serves and grants the operator access in.
SERVED = "agents"


def kind_node_version() -> str:
    """The Kubernetes minor version of kind-config.yaml's node image, e.g. '1.32'."""
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    images = {node["image"] for node in config["nodes"]}
    assert len(images) == 1, images
    (image,) = images
    match = re.fullmatch(r"kindest/node:v(\d+)\.(\d+)\.(\d+)(@sha256:[0-9a-f]{64})?", image)
    assert match, f"kind-config.yaml must pin a kindest/node:vX.Y.Z image, got {image}"
    return f"{match.group(1)}.{match.group(2)}"


K8S_VERSION = kind_node_version()


@functools.cache
def render(path: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required to render the kustomize manifests (it ships kustomize)"
    result = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_kind_node_is_a_supported_release() -> None:
    major, minor = map(int, K8S_VERSION.split("."))
    assert (major, minor) >= (1, 35), "1.35+: every patch has the kubelet's native-sidecar startup fix"


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_every_object_validates_offline(path: str) -> None:
    objs = render(path)
    assert objs
    for obj in objs:
        where = f"{path}: {obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"] == API_VERSION:
            _, errors = admit(obj)
            assert errors == [], f"{where}: {errors}"
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where} is not a valid {K8S_VERSION} object: {'.'.join(map(str, exc.path))}: {exc}")


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_the_crd_is_the_generated_one_and_namespaced_objects_live_in_memsync_system(path: str) -> None:
    objs = render(path)
    assert by_kind(objs, "CustomResourceDefinition") == {
        "sessionmemories.agents.memsync.dev": build_crd(),
        "agentenvironments.agents.memsync.dev": agentenv_schema.build_crd(),
    }
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in objs:
        if obj["kind"] in {"Role", "RoleBinding"} and "leader-election" not in obj["metadata"]["name"]:
            assert obj["metadata"].get("namespace") == SERVED, obj["metadata"][
                "name"
            ]  # the namespaced grants
        elif obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == "memsync-system", obj["metadata"]["name"]


def test_namespace_enforces_restricted() -> None:
    for overlay in OVERLAYS:
        labels = by_kind(render(f"overlays/{overlay}"), "Namespace")["memsync-system"]["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def _pod_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return {"spec": deployment["spec"]["template"]["spec"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workloads_meet_the_restricted_standard(overlay: str) -> None:
    deployments = by_kind(render(f"overlays/{overlay}"), "Deployment")
    assert deployments
    for name, deployment in deployments.items():
        assert restricted_violations(_pod_of(deployment)) == [], name
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert container["resources"]["requests"] and container["resources"]["limits"], name
            assert container["livenessProbe"], name


@pytest.mark.parametrize(
    ("overlay", "image"),
    [
        ("kind", "memsync:kind"),
        ("production", "registry.example.com/"),
        ("store-postgres", "registry.example.com/"),
    ],
)
def test_operator_deployment(overlay: str, image: str) -> None:
    objs = render(f"overlays/{overlay}")
    operator = by_kind(objs, "Deployment")["memsync-operator"]
    # Two replicas electing a leader: a rolling update starts the new one before the old one goes (it lets the
    # Lease go as it stops), a drain takes one at a time, and a lost node's replica goes after 30 s.
    assert operator["spec"]["replicas"] == 2
    assert operator["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pdb = by_kind(objs, "PodDisruptionBudget")["memsync-operator"]["spec"]
    assert pdb == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "memsync-operator"}},
    }
    pod = operator["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "memsync-operator"
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in spread] == ["kubernetes.io/hostname"]
    assert {(t["key"], t["tolerationSeconds"]) for t in pod["tolerations"]} == {
        ("node.kubernetes.io/not-ready", 30),
        ("node.kubernetes.io/unreachable", 30),
    }
    (container,) = pod["containers"]
    assert container["image"].startswith(image)
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The sandbox Pods' memsync containers must run the operator's own image.
    assert env["MEMSYNC_AGENT_IMAGE"] == container["image"]
    # Its Lease identity and the Lease's namespace, from the downward API.
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e
    }
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert container["command"][:2] == ["memsync", "operator"]
    liveness = container["livenessProbe"]["httpGet"]
    assert liveness["path"] == "/healthz"
    # Ready only once kopf runs, i.e. after the start-up check that the API serves the CRDs.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert any(arg.endswith(":8080/healthz") for arg in container["command"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_operator_metrics_are_on_behind_a_service(overlay: str) -> None:
    objs = render(f"overlays/{overlay}")
    container = by_kind(objs, "Deployment")["memsync-operator"]["spec"]["template"]["spec"]["containers"][0]
    flag = container["command"].index("--metrics-port")
    port = int(container["command"][flag + 1])
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]
    service = by_kind(objs, "Service")["memsync-operator-metrics"]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "memsync-operator"}
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_store_server_only_in_the_kind_overlay() -> None:
    kind = render("overlays/kind")
    assert set(by_kind(kind, "Deployment")) == {"memsync-operator", "memsync-store"}
    assert "memsync-store" in by_kind(kind, "Service")
    assert "memsync-store-data" in by_kind(kind, "PersistentVolumeClaim")
    store = by_kind(kind, "Deployment")["memsync-store"]
    assert store["spec"]["strategy"] == {"type": "Recreate"} and store["spec"]["replicas"] == 1
    pod = store["spec"]["template"]["spec"]
    secret_volumes = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert secret_volumes == ["memsync-store-admin"]
    assert "memsync-store-admin" in by_kind(kind, "Secret")
    (container,) = pod["containers"]
    assert container["image"] == "memsync:kind"
    assert "--public-url=http://memsync-store.memsync-system.svc:8700" in container["args"]
    # the admin key is never a plain env value or flag
    assert not any("admin-key=" in arg for arg in container["args"])
    assert all(e["name"] != "MEMSYNC_ADMIN_KEY" for e in container["env"])

    assert by_kind(kind, "PodDisruptionBudget")["memsync-store"]["spec"]["maxUnavailable"] == 1
    assert "memsync-store" in by_kind(kind, "NetworkPolicy")
    env = {e["name"]: e for e in container["env"]}
    assert env["MEMSYNC_STORE_DB"]["value"] == "/var/lib/memsync-store/store.db"

    production = render("overlays/production")
    assert set(by_kind(production, "Deployment")) == {"memsync-operator"}
    assert set(by_kind(production, "Service")) == {"memsync-operator-metrics"}
    assert not by_kind(production, "PersistentVolumeClaim")
    assert not by_kind(production, "Secret") and set(by_kind(production, "PodDisruptionBudget")) == {
        "memsync-operator"
    }
    assert not by_kind(production, "NetworkPolicy")


def test_store_server_on_postgresql_runs_replicas_without_a_volume() -> None:
    objs = render("overlays/store-postgres")
    store = by_kind(objs, "Deployment")["memsync-store"]
    assert store["spec"]["replicas"] == 2
    assert store["spec"]["strategy"]["type"] == "RollingUpdate"
    assert store["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert not by_kind(objs, "PersistentVolumeClaim")
    pod = store["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["admin-key", "tmp"]
    (container,) = pod["containers"]
    assert all(m["mountPath"] != "/var/lib/memsync-store" for m in container["volumeMounts"])
    env = {e["name"]: e for e in container["env"]}
    assert env["MEMSYNC_STORE_DB"] == {
        "name": "MEMSYNC_STORE_DB",
        "valueFrom": {"secretKeyRef": {"name": "memsync-store-postgres", "key": "url"}},
    }
    assert not any(arg.startswith("--db") for arg in container["args"])
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = by_kind(objs, "PodDisruptionBudget")["memsync-store"]["spec"]
    assert pdb == {
        "minAvailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "memsync-store"}},
    }
    policy = by_kind(objs, "NetworkPolicy")["memsync-store"]["spec"]
    assert policy["ingress"] == [
        {"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 8700}]}
    ]
    assert {"protocol": "TCP", "port": 5432} in policy["egress"][1]["ports"]


def test_rbac_is_least_privilege() -> None:
    objs = render("overlays/production")
    roles = by_kind(objs, "ClusterRole")
    assert set(roles) == {"memsync-operator", "memsync-operator-secrets", "memsync-operator-cluster"}
    grants: dict[tuple[str, str], set[str]] = {}
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.setdefault((group, resource), set()).update(rule["verbs"])
    assert grants[("", "secrets")] == {"get"}, "Secrets are read one by one, never listed or watched"
    # Exactly what the controller (controller/kube.py) and kopf call, nothing more: Pods are read, created
    # and deleted, never patched; SessionMemories are patched (kopf's finalizer and annotations) and their
    # status merge-patched, never PUT; Events are created (kopf posts core/v1 Events only). No CRDs or
    # Namespaces: kopf's scanning is off (tests/operator proves it never calls them cluster-wide). Nodes are
    # read one by one (a sandbox Pod's lost node).
    assert grants == {
        ("", "nodes"): {"get"},
        ("", "secrets"): {"get"},
        ("", "pods"): {"get", "list", "watch", "create", "delete"},
        ("", "events"): {"create"},
        ("agents.memsync.dev", "sessionmemories"): {"get", "list", "watch", "patch"},
        ("agents.memsync.dev", "sessionmemories/status"): {"patch"},
        ("agents.memsync.dev", "sessionmemories/finalizers"): {"update"},
    }
    for binding in by_kind(objs, "ClusterRoleBinding").values():
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "memsync-operator", "namespace": "memsync-system"}
        ]


LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["memsync-operator"],
        "verbs": ["get", "update"],
    },
]


def _rules_of(objs: list[dict[str, Any]], kind: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
    return {
        (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["rules"]
        for o in objs
        if o["kind"] == kind
    }


def test_namespaced_rbac_grants_base_rules_in_the_served_namespace_only() -> None:
    objs = render("overlays/namespaced")
    # Cluster-wide only Node reads, and the get and patch of SessionMemories (and their status) that
    # release a deleted namespace's SessionMemories once its RoleBindings are gone.
    assert (
        set(by_kind(objs, "ClusterRole"))
        == set(by_kind(objs, "ClusterRoleBinding"))
        == {"memsync-operator-cluster"}
    )
    assert by_kind(objs, "ClusterRole")["memsync-operator-cluster"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["agents.memsync.dev"], "resources": ["sessionmemories"], "verbs": ["get", "patch"]},
        {"apiGroups": ["agents.memsync.dev"], "resources": ["sessionmemories/status"], "verbs": ["patch"]},
    ]
    cluster_wide = {
        key: rules
        for key, rules in _rules_of(render("overlays/production"), "ClusterRole").items()
        if key[1] != "memsync-operator-cluster"
    }
    roles = _rules_of(objs, "Role")
    # The leader election's Lease is in the operator's own namespace, whatever it serves.
    assert roles.pop(("memsync-system", "memsync-operator-leader-election")) == LEASE_RULES
    assert roles == {(SERVED, name): rules for (_, name), rules in cluster_wide.items()}
    for binding in by_kind(objs, "RoleBinding").values():
        if binding["metadata"]["name"] == "memsync-operator-leader-election":
            assert binding["metadata"]["namespace"] == "memsync-system"
            continue
        assert binding["metadata"]["namespace"] == SERVED
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": binding["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "memsync-operator", "namespace": "memsync-system"}
        ]
    assert set(by_kind(objs, "RoleBinding")) == {name for _, name in roles} | {
        "memsync-operator-leader-election"
    }
    command = by_kind(objs, "Deployment")["memsync-operator"]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert command[-2:] == ["--namespace", SERVED]
    parse_with_cli(command[1:])


def test_environments_rbac_has_a_namespaced_twin_with_the_same_rules() -> None:
    """The add-on's Secret create/delete: cluster-wide in manifests/environments, only in the served
    namespace in manifests/environments/namespaced."""
    cluster_wide = render("environments")
    namespaced = render("environments/namespaced")
    assert {o["kind"] for o in namespaced} == {"Role", "RoleBinding"}
    assert _rules_of(namespaced, "Role") == {
        (SERVED, name): rules for (_, name), rules in _rules_of(cluster_wide, "ClusterRole").items()
    }
    bindings, cluster_bindings = (
        by_kind(namespaced, "RoleBinding"),
        by_kind(cluster_wide, "ClusterRoleBinding"),
    )
    assert set(bindings) == set(cluster_bindings)
    for name, binding in bindings.items():
        assert binding["metadata"]["namespace"] == SERVED
        assert binding["subjects"] == cluster_bindings[name]["subjects"]
        assert binding["roleRef"] == {**cluster_bindings[name]["roleRef"], "kind": "Role"}
    # The Secret create/delete is a role of its own, so it can be bound in some namespaces only.
    roles = _rules_of(namespaced, "Role")
    assert roles[(SERVED, "memsync-operator-environment-secrets")] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"]}
    ]
    assert not [r for r in roles[(SERVED, "memsync-operator-environments")] if "secrets" in r["resources"]]


def test_sample_session_memory_is_valid_and_becomes_a_pod() -> None:
    (sample,) = list(yaml.safe_load_all((MANIFESTS / "samples" / "sessionmemory.yaml").read_text()))
    assert sample["apiVersion"] == API_VERSION and sample["kind"] == KIND
    stored, errors = admit(sample)
    assert errors == []
    spec = validate_spec(stored["spec"])
    assert [s.effective_mount_path for s in spec.stores] == [
        "/mnt/memory/user-preferences",
        "/mnt/memory/runbooks",
    ]


def parse_with_cli(argv: list[str]) -> None:
    """Parse ``argv`` (after ``memsync``) with the real click CLI, resolving subcommands; nothing runs."""
    import click

    from memsync.cli import cli

    ctx = cli.make_context("memsync", list(argv))
    command: click.Command = cli
    while isinstance(command, click.Group):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:
            break
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name, f"no such command in {argv}"
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub
    assert ctx.args == [], f"unparsed arguments {ctx.args} in {argv}"


def _container(overlay: str, deployment: str) -> dict[str, Any]:
    container: dict[str, Any] = by_kind(render(f"overlays/{overlay}"), "Deployment")[deployment]["spec"][
        "template"
    ]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("overlay", ["kind", "store-postgres"])
def test_store_server_command_is_accepted_by_the_cli(overlay: str) -> None:
    container = _container(overlay, "memsync-store")
    assert container["command"][0] == "memsync"
    parse_with_cli(container["command"][1:] + container["args"])


def test_operator_command_is_accepted_by_the_cli() -> None:
    container = _container("kind", "memsync-operator")
    assert container["command"][0] == "memsync"
    parse_with_cli(container["command"][1:] + container.get("args", []))


def test_dockerfile_is_slim_and_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert stages == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    # Every stage from one base image, pinned by digest.
    base = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert len(base) == 1 and re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base[0]), base
    assert re.search(r"^USER 65532(:65532)?$", text, flags=re.MULTILINE)
    assert "PYTHONDONTWRITEBYTECODE=1" in text
    assert re.search(r'^ENTRYPOINT \["memsync"\]$', text, flags=re.MULTILINE)
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in ignore and "!operator" in ignore


def test_make_deploy_puts_the_loaded_image_into_the_kind_cluster() -> None:
    """``make deploy``: its sed must match the kind overlay's image string (or the cluster would try to pull
    an image that was never loaded), and it must apply to the kind cluster, never the current context."""
    make = shutil.which("make")
    assert make, "make is required"
    result = subprocess.run(
        [make, "-n", "deploy", "IMAGE=registry.test/memsync", "TAG=dev-abc", "KIND_CLUSTER=e2e-x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    recipe = result.stdout
    match = re.search(r"sed 's#([^#]+)#([^#]+)#g'", recipe)
    assert match, recipe
    placeholder, replacement = match.groups()
    assert replacement == "registry.test/memsync:dev-abc"
    images = {
        c["image"]
        for d in by_kind(render("overlays/kind"), "Deployment").values()
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {placeholder}
    assert "kubectl --context kind-e2e-x apply" in recipe, recipe
