"""A resource the operator serves that the API server does not serve: the operator must not start (kopf
would resolve it never again and idle with a green liveness), but exit non-zero naming it.

The AgentEnvironment CRD's only version is marked not served (what an upgrade that drops or renames the
version the operator serves looks like to discovery); ``memsync operator --environments`` run against this
API server exits 1 with the missing group/version/resource, and the deployed operator turned to
``--environments`` is never Ready until the version is served again. The CRD is restored afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from memsync.crd import agentenv

from .conftest import REPO, SYSTEM_NS, Cluster

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


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cluster.get(
        "-n", SYSTEM_NS, "pods", "-l", "app.kubernetes.io/name=memsync-operator"
    )["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def exited_1(status: dict[str, Any]) -> bool:
    """The container has exited 1: its current or last state says so, or it was restarted (the process
    kubelet shows a crash-looping container as waiting, with its restart count)."""
    states = (status.get("state") or {}, status.get("lastState") or {})
    return status.get("restartCount", 0) >= 1 or any(
        (state.get("terminated") or {}).get("exitCode") == 1 for state in states
    )


def crashed_not_ready(cluster: Cluster) -> dict[str, Any] | None:
    """The operator's Pod once its container exited at least once and the Pod is not Ready."""
    for pod in operator_pods(cluster):
        statuses = pod.get("status", {}).get("containerStatuses") or []
        ready = [c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == "Ready"]
        if any(exited_1(c) for c in statuses) and not (ready and ready[0]["status"] == "True"):
            return pod
    return None


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or []
    )


def fetch_pod(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return cluster.get_or_none("-n", SYSTEM_NS, "pod", name)


def test_the_deployed_operator_is_not_ready_until_its_crd_version_is_served(deployed: Cluster) -> None:
    """The deployed operator turned to --environments while the AgentEnvironment version is not served: the
    rolling update's new Pod exits 1 and is never Ready (readiness waits for the checks before kopf), while
    the replicas it would replace keep serving (a rolling update takes none away before its successor is
    ready); once the version is served the new Pods start by themselves and the rollout completes."""
    deployed.kubectl("apply", "--server-side", "-k", str(REPO / "manifests/environments"))
    set_served(deployed, False)
    try:
        deployed.wait("discovery to drop the version", lambda: not discovery_serves(deployed), 60)
        before = {p["metadata"]["name"] for p in operator_pods(deployed)}
        deployed.kubectl(
            "-n", SYSTEM_NS, "set", "env", "deployment/memsync-operator", "MEMSYNC_ENVIRONMENTS=true"
        )
        pod = deployed.wait(
            "an operator Pod that exited 1 and is not Ready",
            lambda: crashed_not_ready(deployed),
            120,
            deployed.dump,
        )
        name = pod["metadata"]["name"]
        assert name not in before
        log = deployed.pod_logs(SYSTEM_NS, name, "operator")
        assert f"{agentenv.API_VERSION}/{agentenv.PLURAL} is not served by the API server" in log, log[-3000:]
        assert "starting the memsync operator" not in log  # no restart ever got to kopf
        assert not pod_ready(fetch_pod(deployed, name) or {})
        serving = [p for p in operator_pods(deployed) if p["metadata"]["name"] in before and pod_ready(p)]
        assert len(serving) == len(before) == 2  # the old replicas still serve
        set_served(deployed, True)
        deployed.wait(
            "the new operator Pod Ready once the version is served",
            lambda: pod_ready(fetch_pod(deployed, name) or {}),
            120,
            deployed.dump,
        )
    finally:
        set_served(deployed, True)
        deployed.kubectl(
            "-n", SYSTEM_NS, "set", "env", "deployment/memsync-operator", "MEMSYNC_ENVIRONMENTS-"
        )
        deployed.kubectl(
            "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=180s", timeout=200
        )
