"""The metrics memsync exports: counters are counters, the request count follows the store client, and the
sidecar's ``/metrics`` is prometheus_client's own handler (it negotiates OpenMetrics)."""

from __future__ import annotations

from typing import Any, cast

import httpx
import pytest
from prometheus_client import REGISTRY

from memsync.agent.config import AgentConfig
from memsync.agent.context import SyncContext
from memsync.agent.metrics import Metrics, MetricsServer
from memsync.client import StoreClient
from memsync.controller import metrics as operator_metrics
from memsync.controller.kube import KubeApi
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.settings import ControllerConfig
from memsync.crd.models import PHASES
from support.metric_names import agent_families, operator_families

AGENT_TYPES = {
    "memsync_sync_passes": "counter",
    "memsync_sync_pass_duration_seconds": "histogram",
    "memsync_uploads": "counter",
    "memsync_downloads": "counter",
    "memsync_remote_deletes": "counter",
    "memsync_conflicts": "counter",
    "memsync_refused_files": "counter",
    "memsync_http_requests": "counter",
    "memsync_refused_paths": "gauge",
    "memsync_unreadable_files": "gauge",
    "memsync_held_deletes": "gauge",
    "memsync_pending_deletes": "gauge",
    "memsync_last_successful_pass_timestamp_seconds": "gauge",
}


def test_every_agent_metric_has_its_type() -> None:
    assert {f.name: f.type for f in agent_families()} == AGENT_TYPES


def test_the_operator_metrics_and_their_types() -> None:
    families = operator_families()
    assert {f.name: f.type for f in families} == {
        "memsync_operator_phase_changes": "counter",
        "memsync_operator_pods_created": "counter",
        "memsync_operator_pods_adopted": "counter",
        "memsync_operator_flush_unconfirmed": "counter",
        "memsync_operator_api_errors": "counter",
        "memsync_operator_environment_leases_released": "counter",
        "memsync_operator_environment_handover_seconds": "histogram",
        "memsync_operator_sessionmemories": "gauge",
        "memsync_operator_leader": "gauge",
        "memsync_operator_last_reconcile_timestamp_seconds": "gauge",
        "memsync_operator_periodic_round_timestamp_seconds": "gauge",
        "memsync_operator_sessionmemories_without_status": "gauge",
        "memsync_operator_watch_forbidden": "gauge",
    }


def _session(name: str, phase: str | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "agents", "uid": f"uid-{name}"}}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def test_the_sessionmemories_gauge_follows_what_the_operator_remembers_and_forgets() -> None:
    assert operator_metrics.count_phases([]) == dict.fromkeys([*PHASES, "None"], 0)
    state = SessionMemories(kube=cast(KubeApi, None), config=cast(ControllerConfig, None))

    def gauge() -> dict[str, float]:
        samples = {
            p: REGISTRY.get_sample_value("memsync_operator_sessionmemories", {"phase": p}) for p in PHASES
        }
        return {phase: value for phase, value in samples.items() if value}

    state.remember("agents", "a", _session("a", "Running"))
    state.remember("agents", "b", _session("b", "Running"))
    state.remember("agents", "c", _session("c", None))
    assert gauge() == {"Running": 2}
    assert REGISTRY.get_sample_value("memsync_operator_sessionmemories", {"phase": "None"}) == 1
    state.remember("agents", "a", _session("a", "Succeeded"))
    assert gauge() == {"Running": 1, "Succeeded": 1}
    state.forget("agents", "a")
    state.forget("agents", "b")
    state.forget("agents", "c")
    assert gauge() == {}


async def test_the_request_counter_reads_the_clients_count() -> None:
    config = AgentConfig.model_construct()  # SyncContext keeps it; nothing reads it here
    async with StoreClient("http://127.0.0.1:9", api_key="k") as client:
        shared = SyncContext(config, client)
        registry = shared.metrics.registry
        assert registry.get_sample_value("memsync_http_requests_total") == 0
        client.request_count = 7
        assert registry.get_sample_value("memsync_http_requests_total") == 7


@pytest.mark.parametrize(
    ("accept", "content_type", "ending"),
    [
        ("text/plain", "text/plain; version=0.0.4; charset=utf-8", "\n"),
        ("application/openmetrics-text; version=1.0.0", "application/openmetrics-text", "# EOF\n"),
    ],
)
async def test_sidecar_metrics_endpoint_negotiates_the_format(
    accept: str, content_type: str, ending: str
) -> None:
    metrics = Metrics()
    metrics.uploads.labels("memstore_a").inc(3)
    server = MetricsServer(metrics, host="127.0.0.1", port=0)
    port = await server.start()
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/metrics", headers={"accept": accept})
    finally:
        await server.stop()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(content_type)
    assert 'memsync_uploads_total{store="memstore_a"} 3.0' in response.text
    assert response.text.endswith(ending)
