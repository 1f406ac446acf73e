"""The operator deployed from ``manifests/overlays/kind`` serves its Prometheus metrics on :9478, behind the
Service ``memsync-operator-metrics`` (whose endpoints the control plane fills with the operator's Pod)."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import SYSTEM_NS, Cluster


def operator_pod(cluster: Cluster) -> dict[str, Any]:
    pods = cluster.get("-n", SYSTEM_NS, "pods", "-l", "app.kubernetes.io/name=memsync-operator")["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
    assert len(running) == 1, [p["metadata"]["name"] for p in pods]
    return running[0]


def test_operator_metrics_behind_the_service(deployed: Cluster) -> None:
    pod_ip = operator_pod(deployed)["status"]["podIP"]

    def endpoint_ips() -> set[str]:
        slices = deployed.get(
            "-n", SYSTEM_NS, "endpointslices", "-l", "kubernetes.io/service-name=memsync-operator-metrics"
        )["items"]
        return {
            address
            for s in slices
            for endpoint in s.get("endpoints") or []
            if (endpoint.get("conditions") or {}).get("ready")
            for address in endpoint["addresses"]
            if any(
                port.get("port") == 9478 and port.get("name") == "metrics" for port in s.get("ports") or []
            )
        }

    deployed.wait("the metrics Service's endpoint", lambda: pod_ip in endpoint_ips(), timeout=60)

    def scrape() -> httpx.Response | None:
        try:
            return httpx.get(f"http://{pod_ip}:9478/metrics", timeout=10)
        except httpx.TransportError:
            return None  # the operator binds its metrics port once it has checked the API server

    pod = operator_pod(deployed)["metadata"]["name"]
    response = deployed.wait(
        "the operator's /metrics",
        scrape,
        timeout=60,
        explain=lambda: deployed.pod_logs(SYSTEM_NS, pod, "operator"),
    )
    assert response.status_code == 200
    assert "# TYPE memsync_operator_pods_created_total counter" in response.text
    assert "# TYPE memsync_operator_flush_unconfirmed_total counter" in response.text
