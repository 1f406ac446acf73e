"""bench/latency_proxy.py's fault injection, in front of the real store server: what each fault does to a
request (forwarded or not) and what the client sees; the seeded choice of faults."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from conftest import RunningStoreServer
from memsync.client import StoreClient, errors

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from latency_proxy import FAULT_KINDS, FaultPlan, LatencyProxy, choose_fault


def test_choose_fault_hits_the_rate_with_every_kind_and_repeats_per_seed() -> None:
    plan = FaultPlan(rate=0.10, seed=7)
    rng = random.Random(plan.seed)
    draws = [choose_fault(rng, plan) for _ in range(20_000)]
    counts = Counter(d for d in draws if d is not None)
    assert 1_800 <= sum(counts.values()) <= 2_200
    assert set(counts) == set(FAULT_KINDS)
    assert all(300 <= n <= 500 for n in counts.values()), counts
    again = random.Random(plan.seed)
    assert [choose_fault(again, plan) for _ in range(20_000)] == draws
    with pytest.raises(ValueError, match="rate"):
        FaultPlan(rate=1.5)
    with pytest.raises(ValueError, match="kinds"):
        FaultPlan(kinds=("teleport",))


async def _paths(server: RunningStoreServer, store_id: str) -> list[str]:
    async with StoreClient(server.url, api_key=server.admin_key) as direct:
        return [m.path async for m in direct.list_memories(store_id)]


@pytest.mark.parametrize(
    ("kind", "applied", "error"),
    [
        ("reset", False, errors.TransportError),
        ("response_lost", True, errors.TransportError),
        ("server_error", False, errors.ServerError),
        ("throttle", False, errors.RateLimited),
    ],
)
async def test_each_fault_on_a_create(
    store_server: RunningStoreServer, kind: str, applied: bool, error: type[Exception]
) -> None:
    seen: list[tuple[str, str]] = []
    plan = FaultPlan(rate=1.0, seed=1, kinds=(kind,))
    async with StoreClient(store_server.url, api_key=store_server.admin_key) as direct:
        store = await direct.create_store(f"fault {kind}")
    async with (
        LatencyProxy(
            store_server.url, delay_s=0.0, faults=plan, observe=lambda m, t, b: seen.append((m, t))
        ) as proxy,
        StoreClient(proxy.url, api_key=store_server.admin_key, max_retries=0) as client,
    ):
        with pytest.raises(error):
            await client.create_memory(store.id, "/x.md", "x")
        assert proxy.faults_injected == Counter({kind: 1})
    assert seen == [("POST", f"/v1/memory_stores/{store.id}/memories?beta=true")]
    assert await _paths(store_server, store.id) == (["/x.md"] if applied else [])


async def test_throttle_carries_retry_after_and_delay_still_forwards(
    store_server: RunningStoreServer,
) -> None:
    plan = FaultPlan(rate=1.0, seed=1, kinds=("throttle",), retry_after_s=3)
    async with LatencyProxy(store_server.url, delay_s=0.0, faults=plan) as proxy, httpx.AsyncClient() as http:
        resp = await http.get(f"{proxy.url}/healthz")
        assert resp.status_code == 429 and resp.headers["retry-after"] == "3"
        assert resp.json()["error"]["type"] == "rate_limit_error"
    plan = FaultPlan(rate=1.0, seed=1, kinds=("delay",), delay_range_s=(0.05, 0.05))
    async with LatencyProxy(store_server.url, delay_s=0.0, faults=plan) as proxy, httpx.AsyncClient() as http:
        assert (await http.get(f"{proxy.url}/healthz")).json() == {"status": "ok"}
        assert proxy.faults_injected == Counter({"delay": 1})


async def test_retries_get_through_a_ten_percent_fault_rate(store_server: RunningStoreServer) -> None:
    plan = FaultPlan(rate=0.10, seed=3, delay_range_s=(0.0, 0.01), retry_after_s=0)
    async with LatencyProxy(store_server.url, delay_s=0.0, faults=plan) as proxy:
        async with StoreClient(proxy.url, api_key=store_server.admin_key, max_retries=5) as client:
            store = await client.create_store("through faults")
            for _ in range(60):
                await client.get_store(store.id)
        assert sum(proxy.faults_injected.values()) > 0
        assert proxy.request_count == client.request_count


async def test_an_outage_answers_502_unforwarded_for_its_duration(store_server: RunningStoreServer) -> None:
    async with LatencyProxy(store_server.url, delay_s=0.0) as proxy, httpx.AsyncClient() as http:
        proxy.outage(30.0)
        resp = await http.get(f"{proxy.url}/healthz")
        assert resp.status_code == 502 and "outage" in resp.json()["error"]["message"]
        proxy.outage(0.0)
        assert (await http.get(f"{proxy.url}/healthz")).json() == {"status": "ok"}
