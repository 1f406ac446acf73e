"""The Helm chart (charts/memsync) against the kustomize tree: for the same settings ``helm template`` and
``kubectl kustomize`` give the same objects, compared as parsed objects. The only differences allowed are
Helm's own labels, the Namespace (Helm installs into the release namespace, which it does not own) and the
kind overlay's development admin-key Secret (the chart never makes a Secret). ``helm lint`` passes, and the
chart's own settings (watched namespaces, namespaced RBAC, metrics off, image digest) render as documented.

helm is built from tests/tools/helm (``make tools``); kubectl is required (it ships kustomize).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from memsync.cli.operator import parse_memsync_env
from support.tools import BUILD_TIMEOUT_S, tool

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "memsync"
NAMESPACE = "memsync-system"
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")
PRODUCTION = {"image": {"repository": "registry.example.com/memsync", "tag": "0.1.0"}}
MONITORING = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    }
}
KIND = {
    "image": {"repository": "memsync", "tag": "kind"},
    "storeServer": {"enabled": True},
    "operator": {"nodeLostGrace": 10, "forceDeleteLostPods": True},
}
STORE_POSTGRES = {**PRODUCTION, "storeServer": {"enabled": True, "database": {"type": "postgresql"}}}

Key = tuple[str, str, str]


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/nonexistent", "HELM_CONFIG_HOME": "/nonexistent"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=env)


def helm_template(tmp_path: Path, values: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm = tool("helm")
    return run(
        [str(helm), "template", "memsync", str(CHART), "--namespace", NAMESPACE, "--include-crds",
         "-f", str(values_file), *extra]
    )  # fmt: skip


def helm_objects(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    result = helm_template(tmp_path, values)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def kustomize_objects(tmp_path: Path, overlay: str, components: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required to render the kustomize manifests (it ships kustomize)"
    target = REPO / "manifests" / "overlays" / overlay
    if components:  # the overlay plus optional components, as a user's own kustomization would add them
        root = tmp_path / "kustomize"
        root.mkdir()
        rel = lambda p: os.path.relpath(p, root)  # noqa: E731 (kustomize refuses absolute paths)
        (root / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [rel(target)],
                    "components": [rel(REPO / "manifests" / "components" / c) for c in components],
                }
            )
        )
        target = root
    result = run([kubectl, "kustomize", str(target)])
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def key(obj: dict[str, Any]) -> Key:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def by_key(objs: list[dict[str, Any]], drop_helm_labels: bool = False) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for obj in objs:
        assert key(obj) not in out, f"rendered twice: {key(obj)}"
        labels = obj["metadata"].get("labels", {})
        if drop_helm_labels:
            assert (
                labels.get("app.kubernetes.io/managed-by") == "Helm"
                or obj["kind"] == "CustomResourceDefinition"
            )
            for label in HELM_LABELS:
                labels.pop(label, None)
        out[key(obj)] = obj
    return out


@pytest.mark.parametrize(
    ("values", "overlay", "components", "not_in_chart"),
    [
        pytest.param(PRODUCTION, "production", (), {("Namespace", "", NAMESPACE)}, id="production"),
        pytest.param(
            {**PRODUCTION, **MONITORING},
            "production",
            ("monitoring",),
            {("Namespace", "", NAMESPACE)},
            id="production+monitoring",
        ),
        pytest.param(
            STORE_POSTGRES, "store-postgres", (), {("Namespace", "", NAMESPACE)}, id="store-postgres"
        ),
        pytest.param(
            {**PRODUCTION, "rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": ["agents"]}},
            "namespaced",
            (),
            {("Namespace", "", NAMESPACE)},
            id="namespaced",
        ),
        pytest.param(
            KIND,
            "kind",
            (),
            {("Namespace", "", NAMESPACE), ("Secret", NAMESPACE, "memsync-store-admin")},
            id="kind",
        ),
    ],
)
def test_helm_renders_the_same_objects_as_kustomize(
    tmp_path: Path,
    values: dict[str, Any],
    overlay: str,
    components: tuple[str, ...],
    not_in_chart: set[Key],
) -> None:
    chart = by_key(helm_objects(tmp_path, values), drop_helm_labels=True)
    kustomized = by_key(kustomize_objects(tmp_path, overlay, components))
    assert not_in_chart <= set(kustomized)
    for k in not_in_chart:
        del kustomized[k]
    assert sorted(chart) == sorted(kustomized)
    for k, obj in kustomized.items():
        assert chart[k] == obj, (
            f"{k} differs:\nhelm:\n{yaml.safe_dump(chart[k])}\nkustomize:\n{yaml.safe_dump(obj)}"
        )


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="defaults"),
        pytest.param({**KIND, **MONITORING}, id="everything"),
        pytest.param(
            {
                **STORE_POSTGRES,
                "storeServer": {
                    "enabled": True,
                    "replicas": 3,
                    "workers": 2,
                    "database": {"type": "postgresql", "poolSize": 20},
                },
            },
            id="store-postgres",
        ),
        pytest.param(
            {"rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": ["agents"]}}, id="namespaced"
        ),
        pytest.param(
            {
                "rbac": {"scope": "namespaced"},
                "operator": {"watchNamespaces": ["agents"], "environments": True},
            },
            id="namespaced+environments",
        ),
    ],
)
def test_helm_lint(tmp_path: Path, values: dict[str, Any]) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = run([str(tool("helm")), "lint", "--strict", str(CHART), "-f", str(values_file)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def operator_container(objs: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    deployment = objs[("Deployment", NAMESPACE, "memsync-operator")]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_namespaced_rbac_grants_the_same_rules_in_each_watched_namespace(tmp_path: Path) -> None:
    namespaced = {"rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": ["agents-a", "agents-b"]}}
    objs = by_key(helm_objects(tmp_path, {**namespaced, **MONITORING}))
    cluster = by_key(helm_objects(tmp_path, {}))
    cluster_wide = {k for k in objs if k[0] in ("ClusterRole", "ClusterRoleBinding")}
    # cluster-wide only Node reads and what releases a deleted namespace's SessionMemories
    assert cluster_wide == {
        ("ClusterRole", "", "memsync-operator-cluster"),
        ("ClusterRoleBinding", "", "memsync-operator-cluster"),
    }
    assert objs[("ClusterRole", "", "memsync-operator-cluster")]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["agents.memsync.dev"], "resources": ["sessionmemories"], "verbs": ["get", "patch"]},
        {"apiGroups": ["agents.memsync.dev"], "resources": ["sessionmemories/status"], "verbs": ["patch"]},
    ]
    assert cluster[("ClusterRole", "", "memsync-operator-cluster")]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    for name in ("memsync-operator", "memsync-operator-secrets"):
        for ns in ("agents-a", "agents-b"):
            role = objs[("Role", ns, name)]
            assert role["rules"] == cluster[("ClusterRole", "", name)]["rules"]
            binding = objs[("RoleBinding", ns, name)]
            assert binding["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": name,
            }
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": "memsync-operator", "namespace": NAMESPACE}
            ]
    command = operator_container(objs)["command"]
    assert command[-4:] == ["--namespace", "agents-a", "--namespace", "agents-b"]
    pod_monitor = objs[("PodMonitor", NAMESPACE, "memsync-sidecars")]
    assert pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["agents-a", "agents-b"]}


@pytest.mark.parametrize(
    ("values", "kustomization"),
    [
        pytest.param({}, "environments", id="cluster"),
        pytest.param(
            {"rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": ["agents"]}},
            "environments/namespaced",
            id="namespaced",
        ),
    ],
)
def test_the_environments_add_on_renders_the_kustomize_rbac_in_each_scope(
    tmp_path: Path, values: dict[str, Any], kustomization: str
) -> None:
    """operator.environments: the add-on's RBAC exactly as manifests/environments (cluster) or
    manifests/environments/namespaced (rbac.scope=namespaced, only in the watched namespace), and
    --environments in the operator's command; without it, neither."""
    operator = {**values.get("operator", {}), "environments": True}
    chart = by_key(helm_objects(tmp_path, {**values, "operator": operator}), drop_helm_labels=True)
    result = run([str(shutil.which("kubectl")), "kustomize", str(REPO / "manifests" / kustomization)])
    assert result.returncode == 0, result.stderr
    kustomized = by_key([doc for doc in yaml.safe_load_all(result.stdout) if doc])
    names = {"memsync-operator-environments", "memsync-operator-environment-secrets"}
    assert kustomized and {k[2] for k in kustomized} == names
    for k, obj in kustomized.items():
        assert chart[k] == obj, (
            f"{k} differs:\nhelm:\n{yaml.safe_dump(chart[k])}\nkustomize:\n{yaml.safe_dump(obj)}"
        )
    assert "--environments" in operator_container(chart)["command"]
    without = by_key(helm_objects(tmp_path, values))
    assert not [k for k in without if k[2] in names]
    assert "--environments" not in operator_container(without)["command"]


def test_cluster_scope_with_watched_namespaces_binds_secrets_in_those_namespaces_only(tmp_path: Path) -> None:
    """rbac.scope=cluster with exact operator.watchNamespaces: Secrets (the operator's get, the environments
    add-on's create and delete) are granted by a RoleBinding of their ClusterRole in each watched namespace,
    never cluster-wide; everything else stays cluster-wide."""
    values = {"operator": {"watchNamespaces": ["agents-a", "agents-b"], "environments": True}}
    objs = by_key(helm_objects(tmp_path, values))
    for name in ("memsync-operator-secrets", "memsync-operator-environment-secrets"):
        assert ("ClusterRoleBinding", "", name) not in objs
        assert "secrets" in objs[("ClusterRole", "", name)]["rules"][0]["resources"]
        for ns in ("agents-a", "agents-b"):
            binding = objs[("RoleBinding", ns, name)]
            assert binding["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            }
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": "memsync-operator", "namespace": NAMESPACE}
            ]
    for name in ("memsync-operator", "memsync-operator-environments", "memsync-operator-cluster"):
        assert ("ClusterRoleBinding", "", name) in objs
    secret_rules = [
        (k, rule)
        for k, obj in objs.items()
        if k[0] == "ClusterRole"
        for rule in obj["rules"]
        if "secrets" in rule["resources"]
    ]
    assert {k[2] for k, _ in secret_rules} == {
        "memsync-operator-secrets",
        "memsync-operator-environment-secrets",
    }
    # Namespace patterns cannot be enumerated: then the Secrets are bound cluster-wide (docs/security.md).
    patterns = by_key(helm_objects(tmp_path, {"operator": {"watchNamespaces": ["agents-*"]}}))
    assert ("ClusterRoleBinding", "", "memsync-operator-secrets") in patterns


def test_namespace_patterns_get_namespace_and_crd_watches_cluster_wide(tmp_path: Path) -> None:
    objs = by_key(helm_objects(tmp_path, {"operator": {"watchNamespaces": ["agents-*"]}}))
    rules = objs[("ClusterRole", "", "memsync-operator")]["rules"]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in rules
    plain = by_key(helm_objects(tmp_path, {}))[("ClusterRole", "", "memsync-operator")]["rules"]
    assert not any("namespaces" in rule["resources"] for rule in plain)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rbac": {"scope": "namespaced"}}, "rbac.scope=namespaced needs operator.watchNamespaces"),
        (
            {"rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": ["agents-*"]}},
            "exact namespace names",
        ),
        # values.schema.json: unknown values and keys (a typo) are refused, never ignored.
        ({"rbac": {"scope": "everywhere"}}, "at '/rbac/scope': value must be one of 'cluster', 'namespaced'"),
        ({"storeServer": {"enabeld": True}}, "additional properties 'enabeld' not allowed"),
        (
            {"storeServer": {"enabled": True, "replicas": 2}},
            "storeServer.replicas=2 needs storeServer.database.type=postgresql",
        ),
        ({"storeServer": {"database": {"type": "mysql"}}}, "at '/storeServer/database/type'"),
        ({"image": {"digest": "latest"}}, "at '/image/digest'"),
        (
            {"metrics": {"enabled": False}, "monitoring": {"serviceMonitor": {"enabled": True}}},
            "monitoring.serviceMonitor.enabled needs metrics.enabled",
        ),
    ],
)
def test_contradictory_settings_are_refused_with_the_reason(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    result = helm_template(tmp_path, values)
    assert result.returncode != 0
    assert message in result.stderr


def test_metrics_off_and_image_by_digest(tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    values = {"metrics": {"enabled": False}, "image": {"repository": "reg.test/memsync", "digest": digest}}
    objs = by_key(helm_objects(tmp_path, {**values, "storeServer": {"enabled": True}}))
    assert ("Service", NAMESPACE, "memsync-operator-metrics") not in objs
    container = operator_container(objs)
    assert "--metrics-port" not in container["command"]
    assert [p["name"] for p in container["ports"]] == ["health"]
    # One image setting: the operator, the sandbox Pods' memsync containers and the store server.
    env = {e["name"]: e.get("value") for e in container["env"]}
    store = objs[("Deployment", NAMESPACE, "memsync-store")]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == env["MEMSYNC_AGENT_IMAGE"] == store["image"] == f"reg.test/memsync@{digest}"


def test_default_install_turns_operator_metrics_on(tmp_path: Path) -> None:
    objs = by_key(helm_objects(tmp_path, {}))
    service = objs[("Service", NAMESPACE, "memsync-operator-metrics")]
    assert service["spec"]["ports"][0]["port"] == 9478
    container = operator_container(objs)
    assert container["command"][-2:] == ["--metrics-port", "9478"]
    assert container["image"] == "memsync:0.1.0"  # the chart's appVersion


def test_helm_only_objects_validate_offline(tmp_path: Path) -> None:
    """What only the chart renders (namespaced RBAC, namespace patterns, digests, a storage class) is valid
    for the Kubernetes version the tests pin; the rest is compared with the validated kustomize output."""
    values = {
        "rbac": {"scope": "namespaced"},
        "operator": {
            "watchNamespaces": ["agents"],
            "memsyncEnv": [{"name": "HTTPS_PROXY", "value": "http://p:3128"}],
        },
        "image": {"repository": "reg.test/memsync", "digest": "sha256:" + "cd" * 32},
        "storeServer": {"enabled": True, "storage": {"storageClassName": "fast"}},
    }
    objs = helm_objects(tmp_path, values)
    assert {o["kind"] for o in objs} >= {"Role", "RoleBinding", "Deployment", "PersistentVolumeClaim"}
    env = {e["name"]: e.get("value") for e in operator_container(by_key(objs))["env"]}
    parsed = parse_memsync_env(env["MEMSYNC_OPERATOR_MEMSYNC_ENV"])  # what the operator reads at start
    assert [(e.name, e.value) for e in parsed] == [("HTTPS_PROXY", "http://p:3128")]
    validate_offline(objs)


def validate_offline(objs: list[dict[str, Any]]) -> None:
    """Every object but the CRD is valid for the Kubernetes version the tests pin (kind-config.yaml)."""
    node = yaml.safe_load((REPO / "kind-config.yaml").read_text())["nodes"][0]["image"]
    match = re.search(r":v(\d+\.\d+)\.", node)
    assert match, node
    for obj in objs:
        if obj["kind"] == "CustomResourceDefinition":
            continue
        try:
            kubernetes_validate.validate(obj, match.group(1), strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{key(obj)} is invalid: {'.'.join(map(str, exc.path))}: {exc}")


def store_objects(tmp_path: Path, store: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    objs = by_key(helm_objects(tmp_path, {"storeServer": store}))
    return {k: v for k, v in objs.items() if k[2].startswith("memsync-store")}


def test_store_server_on_postgresql_scales_and_passes_its_settings(tmp_path: Path) -> None:
    store = {
        "enabled": True,
        "replicas": 3,
        "workers": 2,
        "database": {"type": "postgresql", "urlSecret": "pg", "urlSecretKey": "dsn", "poolSize": 20},
        "maxInFlight": 64,
        "maxLoopLag": 0.1,
    }
    objs = store_objects(tmp_path, store)
    validate_offline(list(objs.values()))
    assert not [k for k in objs if k[0] == "PersistentVolumeClaim"], "no volume on PostgreSQL"
    deployment = objs[("Deployment", NAMESPACE, "memsync-store")]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MEMSYNC_STORE_DB"] == {
        "name": "MEMSYNC_STORE_DB",
        "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}},
    }
    assert env["MEMSYNC_STORE_WORKERS"]["value"] == "2"
    assert env["MEMSYNC_DB_POOL_SIZE"]["value"] == "20"
    assert env["MEMSYNC_STORE_MAX_IN_FLIGHT"]["value"] == "64"
    assert env["MEMSYNC_STORE_MAX_LOOP_LAG"]["value"] == "0.1"
    assert [v["name"] for v in pod["volumes"]] == ["admin-key", "tmp"]
    assert objs[("PodDisruptionBudget", NAMESPACE, "memsync-store")]["spec"]["minAvailable"] == 1
    # one replica on PostgreSQL: a PodDisruptionBudget keeping it up would block every drain
    single = store_objects(tmp_path, {**store, "replicas": 1})
    assert single[("Deployment", NAMESPACE, "memsync-store")]["spec"]["replicas"] == 1
    assert single[("PodDisruptionBudget", NAMESPACE, "memsync-store")]["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "memsync-store"}},
    }
    # the defaults on SQLite set neither workers nor a pool
    sqlite = store_objects(tmp_path, {"enabled": True})
    container = sqlite[("Deployment", NAMESPACE, "memsync-store")]["spec"]["template"]["spec"]["containers"][
        0
    ]
    names = {e["name"] for e in container["env"]}
    assert not names & {
        "MEMSYNC_STORE_WORKERS",
        "MEMSYNC_DB_POOL_SIZE",
        "MEMSYNC_STORE_MAX_IN_FLIGHT",
        "MEMSYNC_STORE_MAX_LOOP_LAG",
    }, "the server's own defaults"


def test_the_store_server_is_scraped_with_the_operator(tmp_path: Path) -> None:
    """One flag, monitoring.serviceMonitor.enabled: a ServiceMonitor for the store server's Service too."""
    objs = by_key(helm_objects(tmp_path, {**KIND, **MONITORING}))
    monitor = objs[("ServiceMonitor", NAMESPACE, "memsync-store")]
    service = objs[("Service", NAMESPACE, "memsync-store")]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    without_store = by_key(helm_objects(tmp_path, {**PRODUCTION, **MONITORING}))
    assert ("ServiceMonitor", NAMESPACE, "memsync-store") not in without_store
    assert ("ServiceMonitor", NAMESPACE, "memsync-operator") in without_store


def test_the_runbook_urls_are_prefixed_with_where_the_docs_are_published(tmp_path: Path) -> None:
    base = "https://docs.example.com/memsync/v1"
    monitoring = {"monitoring": {"prometheusRule": {"enabled": True, "runbookBaseUrl": base + "/"}}}
    rule = by_key(helm_objects(tmp_path, monitoring))[("PrometheusRule", NAMESPACE, "memsync")]
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert alerts
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        assert url == f"{base}/docs/operations.md#{alert['alert'].lower()}", url


def test_the_operator_runs_two_electing_replicas_with_the_scheduling_values(tmp_path: Path) -> None:
    values = {
        "imagePullSecrets": [{"name": "regcred"}],
        "operator": {
            "priorityClassName": "memsync-critical",
            "nodeSelector": {"pool": "system"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}
            ],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            "nodeLostTolerationSeconds": 20,
        },
    }
    objs = by_key(helm_objects(tmp_path, values))
    deployment = objs[("Deployment", NAMESPACE, "memsync-operator")]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "memsync-critical"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["affinity"] == values["operator"]["affinity"]  # replaces the default spread
    assert [(t["key"], t.get("tolerationSeconds")) for t in pod["tolerations"]] == [
        ("node.kubernetes.io/not-ready", 20),
        ("node.kubernetes.io/unreachable", 20),
        ("dedicated", None),
    ]
    assert ("PodDisruptionBudget", NAMESPACE, "memsync-operator") in objs
    assert ("Role", NAMESPACE, "memsync-operator-leader-election") in objs
    assert "--no-leader-elect" not in operator_container(objs)["command"]


def test_without_leader_election_one_replica_is_recreated(tmp_path: Path) -> None:
    objs = by_key(helm_objects(tmp_path, {"operator": {"leaderElection": {"enabled": False}, "replicas": 3}}))
    deployment = objs[("Deployment", NAMESPACE, "memsync-operator")]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert ("PodDisruptionBudget", NAMESPACE, "memsync-operator") not in objs
    assert operator_container(objs)["command"][-1] == "--no-leader-elect"


def test_the_store_browser_can_be_exposed_by_an_ingress(tmp_path: Path) -> None:
    ui = {
        "ingress": {
            "enabled": True,
            "host": "memory.example.com",
            "className": "nginx",
            "annotations": {"nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8"},
            "tls": [{"secretName": "memory-tls", "hosts": ["memory.example.com"]}],
        }
    }
    objs = store_objects(tmp_path, {"enabled": True, "ui": ui})
    validate_offline(list(objs.values()))
    ingress = objs[("Ingress", NAMESPACE, "memsync-store-ui")]
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx" and spec["tls"] == ui["ingress"]["tls"]
    assert ingress["metadata"]["annotations"] == ui["ingress"]["annotations"]
    (rule,) = spec["rules"]
    assert rule["host"] == "memory.example.com"
    # only the browser's paths: the memory store API stays inside the cluster
    assert [(p["path"], p["pathType"]) for p in rule["http"]["paths"]] == [
        ("/ui", "Prefix"),
        ("/docs", "Prefix"),
        ("/openapi.json", "Exact"),
    ]
    assert {p["backend"]["service"]["name"] for p in rule["http"]["paths"]} == {"memsync-store"}
    # off by default; the browser itself on by default, and off with ui.enabled: false
    default = store_objects(tmp_path, {"enabled": True})
    assert not [k for k in default if k[0] == "Ingress"]
    container = default[("Deployment", NAMESPACE, "memsync-store")]["spec"]["template"]["spec"]["containers"][
        0
    ]
    assert "MEMSYNC_STORE_UI" not in {e["name"] for e in container["env"]}
    off = store_objects(tmp_path, {"enabled": True, "ui": {**ui, "enabled": False}})
    assert not [k for k in off if k[0] == "Ingress"]
    container = off[("Deployment", NAMESPACE, "memsync-store")]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MEMSYNC_STORE_UI", "value": "false"} in container["env"]
    refused = helm_template(
        tmp_path, {"storeServer": {"enabled": True, "ui": {"ingress": {"enabled": True}}}}
    )
    assert refused.returncode != 0
    assert "storeServer.ui.ingress.enabled needs storeServer.ui.ingress.host" in refused.stderr


def test_the_argocd_health_check_is_rendered_when_asked(tmp_path: Path) -> None:
    """argocd.healthCheck.enabled: a ConfigMap holding manifests/argocd/health.lua under argocd-cm's key
    (tests/unit/test_argocd_health.py runs the script); off by default."""
    objs = by_key(helm_objects(tmp_path, {"argocd": {"healthCheck": {"enabled": True}}}))
    cm = objs[("ConfigMap", NAMESPACE, "memsync-argocd-health")]
    key = "resource.customizations.health.agents.memsync.dev_SessionMemory"
    assert cm["data"] == {key: (REPO / "manifests" / "argocd" / "health.lua").read_text()}
    assert ("ConfigMap", NAMESPACE, "memsync-argocd-health") not in by_key(helm_objects(tmp_path, {}))
