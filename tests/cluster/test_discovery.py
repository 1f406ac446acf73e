"""A resource the operator serves that the API server does not serve: the operator must not start (kopf
would resolve it never again and idle with a green liveness), but exit non-zero naming it.

The AgentEnvironment CRD's only version is marked not served (what an upgrade that drops or renames the
version the operator serves looks like to discovery); ``memsync operator --environments`` run against this
API server exits 1 with the missing group/version/resource. The CRD is restored afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memsync.crd import agentenv

from .conftest import REPO, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

GROUP_VERSION = f"/apis/{agentenv.API_VERSION}"


def set_served(cluster: Cluster, served: bool) -> None:
    patch = [{"op": "replace", "path": "/spec/versions/0/served", "value": served}]
    cluster.kubectl("patch", "crd", agentenv.CRD_NAME, "--type=json", "-p", json.dumps(patch))


def discovery_serves(cluster: Cluster) -> bool:
    return cluster.run_kubectl("get", "--raw", GROUP_VERSION).returncode == 0


def run_operator(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=cluster.info.kubeconfig, MEMSYNC_LOG_FORMAT="json")
    return subprocess.run(
        [sys.executable, "-m", "memsync", "operator", "--agent-image", "memsync:kind", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def test_the_operator_exits_naming_a_resource_discovery_does_not_serve(deployed: Cluster) -> None:
    assert discovery_serves(deployed), "the kind overlay installs the AgentEnvironment CRD"
    set_served(deployed, False)
    try:
        deployed.wait("discovery to drop the version", lambda: not discovery_serves(deployed), 60)
        proc = run_operator(deployed, "--environments", "--namespace", "discovery-check")
        output = proc.stdout + proc.stderr
        assert proc.returncode == 1, output
        missing = f"{agentenv.API_VERSION}/{agentenv.PLURAL} is not served by the API server"
        assert missing in output, output
        assert f"CustomResourceDefinition {agentenv.CRD_NAME}" in output
        # The error log line too (JSON), naming the resource, before kopf ever started.
        assert '"missing": ["' + f"{agentenv.API_VERSION}/{agentenv.PLURAL}" in output, output
        assert "starting the memsync operator" not in output
    finally:
        set_served(deployed, True)
        deployed.wait("discovery to serve the version again", lambda: discovery_serves(deployed), 60)
