"""The operator deployed from ``manifests/overlays/kind`` serves its Prometheus metrics on :9478, behind the
Service ``memsync-operator-metrics`` (whose endpoints the control plane fills with both replicas' Pods): the
replica holding the Lease says it leads, the standby says it does not."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import SYSTEM_NS, Cluster


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    pods = cluster.get("-n", SYSTEM_NS, "pods", "-l", "app.kubernetes.io/name=memsync-operator")["items"]
    running = [
        p
        for p in pods
        if p["status"].get("phase") == "Running"
        and p["status"].get("podIP")
        and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(running) == 2, [p["metadata"]["name"] for p in pods]
    return running


def leader_gauge(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("memsync_operator_leader "):
            return float(line.split()[1])
    return None


def test_operator_metrics_behind_the_service(deployed: Cluster) -> None:
    deployed.wait("two running operator replicas", lambda: _two(deployed), timeout=120)
    pods = operator_pods(deployed)
    ips = {p["status"]["podIP"] for p in pods}

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

    deployed.wait("the metrics Service's endpoints", lambda: ips <= endpoint_ips(), timeout=60)

    def scrape(ip: str) -> httpx.Response | None:
        try:
            return httpx.get(f"http://{ip}:9478/metrics", timeout=10)
        except httpx.TransportError:
            return None  # the operator binds its metrics port once it has checked the API server

    leaders = []
    for pod in pods:
        ip, name = pod["status"]["podIP"], pod["metadata"]["name"]
        response = deployed.wait(
            f"the /metrics of {name}",
            lambda ip=ip: scrape(ip),
            timeout=60,
            explain=lambda name=name: deployed.pod_logs(SYSTEM_NS, name, "operator"),
        )
        assert response.status_code == 200
        assert "# TYPE memsync_operator_pods_created_total counter" in response.text
        assert "# TYPE memsync_operator_flush_unconfirmed_total counter" in response.text
        leaders.append(leader_gauge(response.text))
    assert sorted(leaders) == [0.0, 1.0]  # one replica acts, the other stands by


def _two(cluster: Cluster) -> bool:
    try:
        operator_pods(cluster)
    except AssertionError:
        return False
    return True
