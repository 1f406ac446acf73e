"""The packaged chart as a user installs it: ``make chart`` (``helm package`` and ``helm repo index``) for
the image under test, then ``helm install`` of the .tgz on the kind cluster, and its operator becomes ready.

The release goes into a namespace of its own with namespaced RBAC watching only that namespace, so it
creates no cluster-scoped object beside the kind overlay's operator (the CRDs exist already: Helm leaves
them as they are)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from support.chart_package import package_chart
from support.tools import tool

from .conftest import CLUSTER, KindEnv, dump_cluster_state, kubectl, kubectl_json, run

pytestmark = [pytest.mark.kind, pytest.mark.timeout(900, func_only=True)]


@pytest.fixture
def release_namespace(kind_env: KindEnv) -> Iterator[str]:
    name = f"memsync-pkg-{uuid.uuid4().hex[:8]}"
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_the_packaged_chart_installs_and_its_operator_becomes_ready(
    kind_env: KindEnv, release_namespace: str, tmp_path: Path
) -> None:
    helm = tool("helm")
    repository, tag = kind_env.image.rsplit(":", 1)
    tgz = package_chart(tmp_path / "chart", helm, repository, tag=tag)
    index = yaml.safe_load((tgz.parent / "index.yaml").read_text())
    assert [e["urls"] for e in index["entries"]["memsync"]] == [[tgz.name]]
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"rbac": {"scope": "namespaced"}, "operator": {"watchNamespaces": [release_namespace]}}
        )
    )
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
    }
    installed = run(
        str(helm), "install", "memsync", str(tgz), "--kube-context", f"kind-{CLUSTER}",
        "--namespace", release_namespace, "--create-namespace", "-f", str(values),
        "--wait", "--timeout", "5m",
        env=env, check=False, timeout=400,
    )  # fmt: skip
    assert installed.returncode == 0, f"{installed.stdout}\n{installed.stderr}\n{dump_cluster_state()}"
    kubectl(
        "-n", release_namespace, "rollout", "status", "deployment/memsync-operator", "--timeout=300s",
        timeout=330,
    )  # fmt: skip
    deployment = kubectl_json("-n", release_namespace, "get", "deployment", "memsync-operator")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert {c["image"] for c in containers} == {kind_env.image}, "the image the package was made for"
    assert deployment["status"].get("readyReplicas") == 1
    run(
        str(helm), "uninstall", "memsync", "--kube-context", f"kind-{CLUSTER}", "--namespace",
        release_namespace, "--wait", env=env, timeout=300,
    )  # fmt: skip
